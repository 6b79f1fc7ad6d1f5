//! Options that change what a recording reads (waiter counts, `--cpus`, the idle backoff) and the
//! metadata every recording writes, each on one interpreter.

use super::*;

/// The trace says whether the waiter counts were used; `--no-waiter-counts` turns them off and then
/// nothing is decided by them.
#[test]
fn waiter_counts_are_recorded_and_can_be_turned_off() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let pid = workload.pid.to_string();
    for (flag, used) in [(None, true), (Some("--no-waiter-counts"), false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--pid", &pid, "--duration", "0.3"];
        args.extend(flag);
        let (status, stderr) = run(&args, dir.path());
        assert!(status.success(), "{flag:?}: {stderr}");
        let trace = Trace::load_single(dir.path());
        let said = trace
            .other("gil_waiter_counts")
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            said.starts_with("counted by glibc 2."),
            used,
            "{flag:?}: {said}"
        );
        let decided = trace
            .other("running_classified_by_waiter_counts")
            .as_u64()
            .unwrap();
        if !used {
            assert_eq!(
                decided, 0,
                "--no-waiter-counts still decided {decided} samples"
            );
        }
    }
}

/// `--cpus`: every gilsample thread is kept on the chosen CPU while it records; the trace says so.
/// Every thread of gilsample keeps to `--cpus`, and each is named for what it does, so that `top
/// -H` or a profile tells the sampler from the trace writer.
#[test]
fn cpus_keeps_every_thread_on_the_chosen_cpu_and_each_is_named() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let last_cpu = std::thread::available_parallelism().unwrap().get() - 1;
    let cpu = last_cpu.to_string();
    let recording = start_recording(workload.pid, dir.path(), &["--cpus", &cpu]);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", recording.child.id())).unwrap();
    let mut threads = 0;
    let mut names = Vec::new();
    for task in tasks.flatten() {
        names.push(std::fs::read_to_string(task.path().join("comm")).unwrap());
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(allowed, cpu, "{}", task.path().display());
        threads += 1;
    }
    assert!(threads >= 3, "main, sampler and writer threads: {threads}");
    let pid = workload.pid;
    for name in [format!("sample-{pid}"), format!("write-{pid}")] {
        assert!(
            names.iter().any(|n| n.trim() == name),
            "no thread named {name}: {names:?}"
        );
    }
    recording.signal(nix::sys::signal::Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "{stderr}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("sampler_cpus"), &serde_json::json!([last_cpu]));
}

/// Threads idle in a non-GIL wait are left unread while the GIL's waiter counts rule them out, and
/// read every few samples where there are no counts; busy threads are still fully seen, and
/// `--no-idle-backoff` reads everything every time.
#[test]
fn idle_threads_are_read_less_often_without_losing_the_busy_ones() {
    let python = interpreter("3.12");
    // (flags, readings counted out, readings skipped every few ticks: `None` either way, since with
    // the counts a tick that found fewer than 4 idle threads before reads them every few ticks)
    let runs: [(&[&str], bool, Option<bool>); 3] = [
        (&[], true, None),
        (&["--no-waiter-counts"], false, Some(true)),
        (&["--no-idle-backoff"], false, Some(false)),
    ];
    for (flags, expect_counted_out, expect_skips) in runs {
        let workload = Workload::start(&python, &["contention", "--threads", "2", "--idle", "4"]);
        let dir = tempfile::tempdir().unwrap();
        let pid = workload.pid.to_string();
        let mut args = vec!["--pid", &pid, "--duration", "0.5"];
        args.extend_from_slice(flags);
        let (status, stderr) = run(&args, dir.path());
        assert!(status.success(), "{stderr}");
        let trace = Trace::load_single(dir.path());
        let skipped = trace.other("kernel_reads_skipped_idle").as_u64().unwrap();
        if let Some(expect_skips) = expect_skips {
            assert_eq!(skipped > 0, expect_skips, "{flags:?}: {skipped} skipped");
        }
        let counted_out = trace.other("kernel_reads_counted_out").as_u64().unwrap();
        assert_eq!(
            counted_out > 0,
            expect_counted_out,
            "{flags:?}: {counted_out} counted out"
        );
        let spinners = workload.tids_named("spinner");
        assert_eq!(spinners.len(), 2);
        for tid in spinners {
            let has = |name: &str| {
                trace
                    .events()
                    .iter()
                    .any(|e| e.tid == tid && e.name == name)
            };
            assert!(
                has("hold_gil") && has("take_gil"),
                "{flags:?}: spinner {tid}"
            );
        }
        let idle = workload.tids_named("idle");
        assert!(
            trace.events().iter().all(|e| !idle.contains(&e.tid)),
            "idle threads never wait for or hold the GIL"
        );
    }
}

/// Every key a recording writes into `otherData` is in docs/ARCHITECTURE.md's table of them, and
/// every key the table names is written: the table is what an engineer reads to know what a key
/// means.
#[test]
fn every_metadata_key_is_in_the_architecture_table() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let (status, stderr) = run(&["--pid", &pid, "--duration", "0.3"], dir.path());
    assert!(status.success(), "{stderr}");
    let trace = Trace::load_single(dir.path());
    let written: Vec<String> = trace.value["otherData"]
        .as_object()
        .expect("otherData is an object")
        .keys()
        .cloned()
        .collect();
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"),
    )
    .unwrap();
    let table = doc
        .split("## The trace file's metadata")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/ARCHITECTURE.md has a section \"The trace file's metadata\"");
    let documented: Vec<String> = table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .flat_map(|line| {
            let first_cell = line.split('|').nth(1).unwrap_or("");
            first_cell
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<&String> = written.iter().filter(|k| !documented.contains(k)).collect();
    let stale: Vec<&String> = documented.iter().filter(|k| !written.contains(k)).collect();
    assert!(written.len() > 20, "the recording wrote only {written:?}");
    assert!(
        missing.is_empty() && stale.is_empty(),
        "written but not in the table: {missing:?}; in the table but not written: {stale:?}"
    );
}

/// Only a name ending in .json is one file: `-o trace.txt` is a directory, and said to be one.
#[test]
fn an_output_named_like_a_file_is_said_to_be_a_directory() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let record_into = |output: &std::path::Path| {
        let out = gilsample()
            .args(["--pid", &pid, "--duration", "0.2", "-o"])
            .arg(output)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let named = dir.path().join("trace.txt");
    let stderr = record_into(&named);
    let said = format!("note: -o {} will be a directory", named.display());
    assert!(stderr.contains(&said), "{stderr}");
    Trace::load_single(&named);
    // A directory named with a date, or one that exists, is nothing to remark on.
    let stderr = record_into(&dir.path().join("run.2026-12-07"));
    assert!(!stderr.contains("will be a directory"), "{stderr}");
}
