//! A wait flag that cannot let anything through (`--timeout 0`, or under the 1 ms a host
//! takes, `HostRules::defects`) is a usage error from clap: exit code 2, the flag and the
//! accepted range named, before anything starts. Before, `mcpl inspect --timeout 0.0005`
//! passed the CLI's own check (not zero) and failed at connect with
//! `HostError::InvalidConfig`; zero itself was refused after parsing, by each command in
//! its own words (`check` as an unreachable target).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `mcpl ARGS` with no input; its exit code and stderr. A deadlock guard kills a run
/// that is still going after a minute (it then fails the test, never hangs it).
fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_wait_flag_that_cannot_work_is_a_usage_error_from_clap() {
    let flags: [(&[&str], &str); 4] = [
        (&["inspect", "--repl"], "--timeout"),
        (&["check", "--quick"], "--timeout"),
        (&["check-host"], "--timeout"),
        (&["check-host"], "--inference-timeout"),
    ];
    for (command, flag) in flags {
        for value in ["0", "0.0005", "-1", "nan", "86401"] {
            // `--flag=VALUE`: `-1` is then a value, not a flag.
            let given = format!("{flag}={value}");
            let mut args = command.to_vec();
            args.push(&given);
            let (code, stderr) = run(&args);
            assert_eq!(code, Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains("invalid value") && stderr.contains(flag),
                "{args:?}: {stderr}"
            );
            assert!(stderr.contains("0.001"), "{args:?}: {stderr}");
        }
    }
}

/// A watch may be 0 (listen for nothing): that flag keeps taking it, and still refuses
/// what is no number of seconds.
#[test]
fn a_watch_of_zero_is_still_taken_and_a_negative_one_refused_by_clap() {
    for command in ["check", "check-host"] {
        let (code, stderr) = run(&[command, "--watch=-1"]);
        assert_eq!(code, Some(2), "{command}: {stderr}");
        assert!(stderr.contains("invalid value"), "{command}: {stderr}");
    }
    let (code, stderr) = run(&["check", "--quick", "--timeout", "5", "--watch", "0"]);
    assert_eq!(code, Some(0), "{stderr}");
}
