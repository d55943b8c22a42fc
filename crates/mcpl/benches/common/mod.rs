//! Shared bench plumbing: a quick criterion configuration and a ratio recorder.
//!
//! Every figure these benches report is a ratio against a baseline measured in the same
//! process, back to back, because the machines they run on are shared and noisy. Criterion
//! prints its own absolute estimates; the recorder keeps the per-sample time per iteration of
//! every routine (through `iter_custom`) and prints the median ratios at the end.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use criterion::Criterion;

/// Quick by default (`cargo bench -p mcpl` stays within a few minutes on 2 cores); command
/// line flags (`--sample-size`, `--measurement-time`, a filter, ...) still override.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .without_plots()
        .configure_from_args()
}

/// Whether the binary runs as a benchmark (`cargo bench`) rather than a smoke test
/// (`cargo test --benches`, which passes no `--bench`).
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Records one sample of `iters` iterations taking `elapsed` for routine `key`; returns
/// `elapsed` so it can end an `iter_custom` closure.
pub fn record(key: &str, iters: u64, elapsed: Duration) -> Duration {
    if iters > 0 {
        let per = elapsed.as_secs_f64() / iters as f64;
        SAMPLES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .push(per);
    }
    elapsed
}

/// The median seconds per iteration recorded for `key`.
pub fn median(key: &str) -> Option<f64> {
    let map = SAMPLES.lock().unwrap_or_else(|p| p.into_inner());
    let mut v = map.get(key)?.clone();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// One line of the final table: `subject / baseline` against a target ratio.
pub struct Ratio {
    /// What is compared.
    pub name: &'static str,
    /// The measured routine's key.
    pub subject: &'static str,
    /// The baseline's key.
    pub baseline: &'static str,
    /// The largest acceptable ratio (`None`: reported, no target).
    pub target: Option<f64>,
}

/// Prints the machine, the load and every ratio with its verdict.
pub fn report(title: &str, ratios: &[Ratio]) {
    println!("\n== {title}: ratios (median s/iter, same run) ==");
    println!("{}", machine());
    if !bench_mode() {
        println!("(smoke run without --bench: one iteration each, unoptimised; not a measurement)");
    }
    for r in ratios {
        match (median(r.subject), median(r.baseline)) {
            (Some(s), Some(b)) if b > 0.0 => {
                let ratio = s / b;
                let verdict = match r.target {
                    Some(t) if ratio <= t => format!("target <= {t}x  MET"),
                    Some(t) => format!("target <= {t}x  MISSED"),
                    None => "(reported)".to_owned(),
                };
                println!(
                    "{:<58} {:>10} vs {:>10}  ratio {:>7.2}x  {verdict}",
                    r.name,
                    human(s),
                    human(b),
                    ratio,
                );
            }
            _ => println!("{:<58} (not measured in this run)", r.name),
        }
    }
}

/// A duration in seconds, in a readable unit.
pub fn human(secs: f64) -> String {
    if secs < 1e-6 {
        format!("{:.1} ns", secs * 1e9)
    } else if secs < 1e-3 {
        format!("{:.2} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// `nproc`, CPU model and load average, for the record.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("machine: nproc {nproc}, cpu {cpu:?}, loadavg {load}")
}

/// Prints recorded per-message times as messages per second.
pub fn rates(keys: &[&str]) {
    for k in keys {
        if let Some(s) = median(k) {
            println!("{k:<58} {:>12.0} messages/s", 1.0 / s);
        }
    }
}

/// A paired measurement, robust to load that changes during the run: `rounds` rounds,
/// each timing `k` calls of the baseline then `k` calls of the subject back to back; the
/// result is the median of the per-round ratios (subject / baseline).
pub fn paired(
    mut baseline: impl FnMut(),
    mut subject: impl FnMut(),
    rounds: usize,
    k: usize,
) -> f64 {
    let mut ratios = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        for _ in 0..k {
            baseline();
        }
        let b = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        for _ in 0..k {
            subject();
        }
        let s = t.elapsed().as_secs_f64();
        if b > 0.0 {
            ratios.push(s / b);
        }
    }
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Prints one paired ratio with its verdict.
pub fn report_paired(name: &str, ratio: f64, target: f64) {
    println!(
        "{name:<58} paired median ratio {ratio:>7.2}x  target <= {target:.1}x  {}",
        if ratio <= target { "MET" } else { "MISSED" }
    );
}
