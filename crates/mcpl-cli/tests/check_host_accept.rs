//! `mcpl check-host --tcp`: a failed `accept` (here EMFILE, the process out of file
//! descriptors) is said on stderr and retried within the accept window, not the end of the
//! run. Linux only: the limit is lowered on the running checker (prlimit(2)) to just what
//! its open descriptors (`/proc/PID/fd`) and one silent connection need.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

fn report_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpl-check-host-accept-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The highest descriptor number `pid` has open, and how many it has.
fn descriptors(pid: u32) -> (u32, u32) {
    let mut max = 0;
    let mut count = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd: u32 = entry
            .unwrap()
            .file_name()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        max = max.max(fd);
        count += 1;
    }
    (max, count)
}

/// Sets the soft RLIMIT_NOFILE of `pid` to `limit` (descriptor numbers below it).
fn limit_descriptors(pid: u32, limit: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit(2) with a valid pid, a null new limit (read only) and a valid out
    // pointer; then with a valid new limit.
    let got = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(got, 0, "prlimit read: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: limit,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit set: {}", std::io::Error::last_os_error());
}

/// The checker, out of descriptors when the host connects: every free descriptor is held by
/// a silent connection, so the host's `accept` fails (EMFILE). It had ended the run ("accept
/// failed: Too many open files", exit 2, no host checked); now stderr says so, the accept is
/// retried, and once a silent connection ends (freeing its descriptor) the host is accepted
/// and checked.
#[tokio::test]
async fn a_failed_accept_is_retried_not_the_end_of_the_run() {
    let report = report_path("emfile.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"));
    child
        .args(["check-host", "--json", "--tcp", "127.0.0.1:0"])
        .args([
            "--timeout",
            "10",
            "--inference-timeout",
            "1",
            "--watch",
            "0",
        ])
        .arg("--report")
        .arg(&report)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Descriptors this process inherited (a jobserver's pipe, a harness's) are not passed on,
    // so the checker's table is its own and `descriptors` counts what it opened.
    // SAFETY: only fcntl(2), async-signal-safe, between fork and exec.
    unsafe {
        child.pre_exec(|| {
            for fd in 3..4096 {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let addr = first.rsplit("tcp://").next().unwrap().to_owned();
    let (said, mut stderr) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            let _ = said.send(l);
        }
    });

    // Room for the descriptors open now and for one more: the holes below the highest, and
    // the one above it. Each is taken by a silent connection.
    let (max, count) = descriptors(pid);
    limit_descriptors(pid, u64::from(max) + 2);
    let free = max + 2 - count;
    assert!(free <= 16, "{count} descriptors, the highest {max}");
    let mut silent = Vec::new();
    for _ in 0..free {
        silent.push(tokio::net::TcpStream::connect(addr.as_str()).await.unwrap());
    }
    // The host: its initialize waits in its socket until it is accepted.
    let mut host = tokio::net::TcpStream::connect(addr.as_str()).await.unwrap();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18",
                    "capabilities": { "experimental": { "mcpl": { "version": "0.5" } } },
                    "clientInfo": { "name": "h", "version": "0" } } });
    host.write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();

    let mut all = Vec::new();
    let failed = tokio::time::timeout(GUARD, async {
        while let Some(l) = stderr.recv().await {
            let failed = l.contains("accept failed");
            all.push(l);
            if failed {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(failed, "no accept failed: {all:?}");
    // A descriptor freed: the accept is retried and takes the host.
    drop(silent.pop());
    let mut answer = [0u8; 1];
    let read = tokio::time::timeout(GUARD, host.read(&mut answer)).await;
    assert!(
        matches!(read, Ok(Ok(1))),
        "the host got no answer ({read:?}); stderr: {all:?}"
    );
    drop(host);
    drop(silent);
    let status = tokio::time::timeout(GUARD, child.wait())
        .await
        .unwrap()
        .unwrap();
    while let Ok(l) = stderr.try_recv() {
        all.push(l);
    }
    let text = std::fs::read_to_string(&report).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let advertises = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "host.initialize-advertises-mcpl")
        .unwrap();
    assert_eq!(advertises["status"], "pass", "{doc:#}\n{all:?}");
    assert_ne!(status.code(), Some(101), "the checker panicked");
}
