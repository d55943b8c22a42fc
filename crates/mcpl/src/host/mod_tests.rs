//! Tests of the diagnostics delivery of `HostSession` (`report_diag`, `Lost`).

use super::*;

fn panicked(i: u32) -> HostDiagnostic {
    HostDiagnostic::HandlerPanicked {
        method: format!("m{i}"),
    }
}

/// Once the session's driver has delivered the final count ([`deliver_lost`]) and
/// is gone, a diagnostic the connection's forwarder still reports (a frame the reader
/// was finishing as the session ended) must not be counted as dropped where no later
/// count will ever carry it: the task waiting to deliver the final count holds the
/// queue open, so the forwarder's weak sender still upgrades.
#[tokio::test(flavor = "current_thread")]
async fn a_diagnostic_reported_after_the_final_count_is_not_counted_and_forgotten() {
    let (tx, mut rx) = queue::channel::<HostDiagnostic>(2);
    let weak = tx.downgrade();
    let lost: Mutex<Lost> = Mutex::default();
    let label = std::sync::OnceLock::new();
    for i in 0..5 {
        report_diag(&label, &tx, &lost, None, panicked(i));
    }
    // The queue is full (2) and 3 were dropped: the driver ends, the count waits in a
    // task for room, and the driver's sender is gone.
    deliver_lost(&tx, &lost);
    drop(tx);
    // The forwarder, as `connect_peer` sets it up, reporting late.
    if let Some(diags) = weak.upgrade() {
        report_diag(&label, &diags, &lost, None, panicked(99));
    }
    let mut got = Vec::new();
    while let Some(d) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the diagnostics queue ends")
    {
        got.push(d);
    }
    assert!(
        matches!(
            got.as_slice(),
            [
                HostDiagnostic::HandlerPanicked { .. },
                HostDiagnostic::HandlerPanicked { .. },
                HostDiagnostic::DiagnosticsDropped { count: 3 },
            ]
        ),
        "{got:?}"
    );
    assert_eq!(
        lost.lock().unwrap().count,
        0,
        "a diagnostic was counted as dropped after the final count: nobody will deliver it"
    );
}

/// Counts the `mcpl host diagnostic` log lines of the thread it is the default
/// subscriber of.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Lines {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Found(bool);
        impl tracing::field::Visit for Found {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" && format!("{v:?}").starts_with("mcpl host diagnostic") {
                    self.0 = true;
                }
            }
        }
        let mut found = Found(false);
        e.record(&mut found);
        if found.0 {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// The log is throttled per kind, and after the session's final count a diagnostic
/// finding the stream full is not counted: one both throttled and undeliverable is
/// logged anyway, so it is never lost to both (found by review: it vanished).
#[tokio::test(flavor = "current_thread")]
async fn a_diagnostic_neither_streamed_nor_counted_after_the_end_is_still_logged() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let lines = Lines::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let (tx, _rx) = queue::channel::<HostDiagnostic>(2);
    let lost: Mutex<Lost> = Mutex::default();
    let label = std::sync::OnceLock::new();
    for i in 0..2 {
        report_diag(&label, &tx, &lost, None, panicked(i));
    }
    // One line for the kind; the second was throttled, and streamed.
    assert_eq!(lines.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    lost.lock().unwrap().ended = true;
    // The stream is full and the kind's line throttled: it must still be logged.
    report_diag(&label, &tx, &lost, None, panicked(99));
    assert_eq!(lines.0.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A diagnostic reported after the final count still reaches a queue that has room.
#[tokio::test(flavor = "current_thread")]
async fn a_diagnostic_reported_after_the_final_count_is_delivered_when_there_is_room() {
    let (tx, mut rx) = queue::channel::<HostDiagnostic>(4);
    let lost: Mutex<Lost> = Mutex::default();
    let label = std::sync::OnceLock::new();
    deliver_lost(&tx, &lost);
    report_diag(&label, &tx, &lost, None, panicked(7));
    drop(tx);
    assert!(matches!(
        rx.recv().await,
        Some(HostDiagnostic::HandlerPanicked { method }) if method == "m7"
    ));
    assert!(rx.recv().await.is_none());
}
