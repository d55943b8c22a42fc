//! The writer task: queued frames out, in order, in batches.

use super::*;

/// How long queued frames may still take to be written after the connection closed, all of
/// them and the transport's close together, when no write timeout is configured.
pub(super) const CLOSE_DRAIN_LIMIT: Duration = Duration::from_secs(5);

pub(super) async fn writer_task(
    shared: Arc<Shared>,
    mut out: queue::Receiver<String>,
    guard: Option<Box<dyn std::any::Any + Send>>,
) {
    /// Marks the writer finished on every way out, a cancelled task included.
    struct Finished(Arc<Shared>);
    impl Drop for Finished {
        fn drop(&mut self) {
            self.0.finished.send_replace(true);
        }
    }
    // Declared first, so it is dropped last: after the writer and the guard.
    let _finished = Finished(shared.clone());
    let mut closed = shared.closed.subscribe();
    let write_timeout = shared.config.write_timeout;
    // The close drain's one allowance, from the moment the close is seen: every batch after
    // it and the final close share it. A fresh one per batch let a side that read just fast
    // enough keep a closed connection writing for as long as it had frames queued.
    let drain = write_timeout.unwrap_or(CLOSE_DRAIN_LIMIT);
    let mut drain_until: Option<tokio::time::Instant> = None;
    let mut batch: Vec<String> = Vec::new();
    loop {
        let text = tokio::select! {
            biased;
            t = out.recv() => match t {
                Some(t) => t,
                None => break,
            },
            _ = until_closed(&mut closed) => break,
        };
        // Frames already queued behind this one go out in the same write and flush (same
        // bytes, fewer syscalls and wake-ups), up to a bounded batch. Reminders (empty
        // strings) only ask for a partly written frame to be finished, which any write does.
        batch.clear();
        let mut taken = 1;
        let mut bytes = text.len();
        if !text.is_empty() {
            batch.push(text);
        }
        while taken < WRITE_BATCH_FRAMES && bytes < WRITE_BATCH_BYTES {
            match out.try_recv() {
                Ok(t) => {
                    taken += 1;
                    bytes += t.len();
                    if !t.is_empty() {
                        batch.push(t);
                    }
                }
                Err(_) => break,
            }
        }
        // Senders queue behind the batch while the writer is out of its slot.
        let (writer, tapped) = {
            let mut slot = lock(&shared.slot);
            (slot.writer.take(), std::mem::take(&mut slot.head_tapped))
        };
        let Some(mut writer) = writer else {
            break;
        };
        let result = {
            let write = write_batch(&shared, writer.as_mut(), &batch, tapped, write_timeout);
            tokio::pin!(write);
            tokio::select! {
                r = &mut write => r,
                // Closed mid-write: the frames in flight get what is left of the drain.
                _ = until_closed(&mut closed) => {
                    let until = *drain_until.get_or_insert_with(|| Instant::now() + drain);
                    match tokio::time::timeout_at(until, &mut write).await {
                        Ok(r) => r,
                        Err(_) => Err(CloseReason::WriteTimeout(drain)),
                    }
                }
            }
        };
        if let Err(reason) = result {
            shared.close(reason);
            out.close();
            drop(writer);
            drop(guard);
            return;
        }
        let mut slot = lock(&shared.slot);
        slot.queued = slot.queued.saturating_sub(taken);
        slot.writer = Some(writer);
    }
    // Closed: no more writes from senders; write what was already queued (e.g. final
    // responses), then shut down.
    out.close();
    let (writer, mut tapped) = {
        let mut slot = lock(&shared.slot);
        (slot.writer.take(), std::mem::take(&mut slot.head_tapped))
    };
    let Some(mut writer) = writer else {
        drop(guard);
        return;
    };
    let until = *drain_until.get_or_insert_with(|| Instant::now() + drain);
    let _ = tokio::time::timeout_at(until, async {
        while let Ok(text) = out.try_recv() {
            let batch: &[String] = if text.is_empty() {
                &[]
            } else {
                std::slice::from_ref(&text)
            };
            let head_tapped = std::mem::take(&mut tapped);
            if write_batch(&shared, writer.as_mut(), batch, head_tapped, None)
                .await
                .is_err()
            {
                break;
            }
        }
        let _ = writer.close().await;
    })
    .await;
    // The writer (e.g. a child's stdin) goes first, then whatever the transport kept alive.
    drop(writer);
    drop(guard);
}

/// Most frames written with one write and flush.
pub(super) const WRITE_BATCH_FRAMES: usize = 64;
/// Stop adding frames to a batch once it holds this many bytes.
pub(super) const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// Writes queued frames together (the write timeout applies to the batch), tapping each
/// before it is written; the first not when `head_tapped` ([`WriterSlot::head_tapped`]).
pub(super) async fn write_batch(
    shared: &Shared,
    writer: &mut dyn FrameWriter,
    texts: &[String],
    head_tapped: bool,
    timeout: Option<Duration>,
) -> Result<(), CloseReason> {
    for text in texts.iter().skip(usize::from(head_tapped)) {
        shared.tap(FrameDirection::Outbound, text);
    }
    // Before any byte goes out: an answer read from now on may name these requests.
    for text in texts {
        shared.note_written(text);
    }
    if let [text] = texts {
        return write_one(shared, writer, text, timeout).await;
    }
    // No frame: only the rest of a partly written one is owed.
    let write = if texts.is_empty() {
        writer.flush_pending()
    } else {
        writer.send_many(texts)
    };
    let result = match timeout {
        None => write.await,
        Some(d) => match tokio::time::timeout(d, write).await {
            Ok(r) => r,
            Err(_) => return Err(CloseReason::WriteTimeout(d)),
        },
    };
    shared.touch();
    result.map_err(|e| CloseReason::Io(e.to_string()))
}

pub(super) async fn write_one(
    shared: &Shared,
    writer: &mut dyn FrameWriter,
    text: &str,
    timeout: Option<Duration>,
) -> Result<(), CloseReason> {
    let result = match timeout {
        None => writer.send(text).await,
        Some(d) => match tokio::time::timeout(d, writer.send(text)).await {
            Ok(r) => r,
            Err(_) => return Err(CloseReason::WriteTimeout(d)),
        },
    };
    shared.touch();
    result.map_err(|e| CloseReason::Io(e.to_string()))
}
