//! Many processes at once: accelerator discovery (with device nodes made for the test in a private
//! mount namespace), PID lists with --merge, descendants with --subprocesses, fairness across 8
//! targets, containers (another PID and mount namespace) recorded from outside and from inside
//! without BPF privileges. Refusals for lack of access are tests/permissions.rs'.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use nix::sys::signal::Signal;

use common::{
    KilledOnDrop, Recording, Trace, Workload, gilsample, interpreter, ready_pid, sid_root,
    succeeded,
};
use gilsample::error::exit::{FAILURE, NO_SUCH_PROCESS, UNSUPPORTED};

/// Discovery sees every process on the machine: the device tests must not see each other's nodes.
static DEVICES: Mutex<()> = Mutex::new(());

/// The device lock, also after another device test failed while holding it: one failure must not
/// fail the others.
fn devices() -> MutexGuard<'static, ()> {
    DEVICES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A process started in a private mount namespace whose /dev is a tmpfs holding `node` (a char device
/// with the numbers of /dev/null), with `command` run there via `sh -c`, once it printed its first
/// line, and that line.
fn with_device(node: &str, command: &str) -> (KilledOnDrop, String) {
    let script = format!(
        "mount -t tmpfs tmpfs /dev && mknod /dev/{node} c 1 3 && mknod /dev/null c 1 3 && exec {command}"
    );
    KilledOnDrop::spawn_until_first_line(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]))
}

fn python_holding(node: &str) -> (KilledOnDrop, u32) {
    let python = interpreter("3.12");
    let command = format!(
        "{} {} contention --threads 2 --open /dev/{node}",
        python.command[0], python.workload
    );
    let (child, line) = with_device(node, &command);
    let pid = ready_pid(&line);
    (child, pid)
}

#[test]
fn all_npu_records_python_users_of_the_npu_and_skips_the_others() {
    let _guard = devices();
    let (_python, python_pid) = python_holding("davinci0");
    let (_other, _) = with_device("davinci1", "sh -c 'echo up; exec sleep 60 3</dev/davinci1'");
    let dir = tempfile::tempdir().unwrap();
    let out = gilsample()
        .args(["--all-npu", "--duration", "0.3", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let trace = Trace::load(&dir.path().join(format!("GIL_{python_pid}_rank_0.json")));
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
    assert!(
        stderr.contains("skipping process") && stderr.contains("not a Python process"),
        "{stderr}"
    );
}

#[test]
fn all_gpu_finds_nothing_then_a_new_gpu_user() {
    let _guard = devices();
    let dir = tempfile::tempdir().unwrap();
    let none = gilsample()
        .args(["--all-gpu", "--duration", "0.1", "--quiet", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        none.status.code(),
        Some(NO_SUCH_PROCESS),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
    assert!(String::from_utf8_lossy(&none.stderr).contains("NVIDIA GPU"));

    // A GPU user that appears while recording runs is picked up. The recording is stopped once it
    // reports sampling that user (`started`: readiness), not after a duration that a loaded machine
    // may need more than; the long --duration only lets discovery wait with nothing found at first.
    let mut recording = Recording::spawn(
        gilsample()
            .args(["--all-gpu", "--duration", "600", "-o"])
            .arg(dir.path()),
    );
    let (_python, pid) = python_holding("nvidia0");
    recording.wait_until_started(pid);
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "{stderr}");
    let trace = Trace::load(&dir.path().join(format!("GIL_{pid}_rank_0.json")));
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
}

/// `gilsample top --all-gpu` watches the processes `record --all-gpu` records: the GPU's Python user.
#[test]
fn top_watches_the_python_users_of_the_gpu() {
    let _guard = devices();
    let (_python, pid) = python_holding("nvidia0");
    let out = gilsample()
        .args(["top", "--all-gpu", "--once"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let table = stdout
        .split("\n\n")
        .find(|t| t.starts_with(&format!("process {pid} ")))
        .unwrap_or_else(|| panic!("no table for {pid}:\n{stdout}"));
    assert!(
        table.lines().any(|l| l.starts_with("spinner-0 ")),
        "{table}"
    );
}

/// A pid list with one process that cannot be recorded says so as the others start, not only in
/// the summary at the end.
#[test]
fn a_pid_of_the_list_that_cannot_be_recorded_is_said_at_once() {
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let mut exited = Command::new("true").spawn().unwrap();
    let gone = exited.id();
    exited.wait().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut recording = Recording::spawn(
        gilsample()
            .args(["--pid", &format!("{},{gone}", workload.pid), "-o"])
            .arg(dir.path()),
    );
    let skipped = recording.wait_until("skipped", Some(gone));
    assert!(
        skipped["why"].as_str().unwrap().contains("does not exist"),
        "{skipped}"
    );
    recording.wait_until_started(workload.pid);
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    // One process of the list not recorded: the session's status says so.
    assert_eq!(status.code(), Some(FAILURE), "{stderr}");
    let said_first = stderr
        .find(&format!("skipping process {gone}"))
        .expect("said while recording");
    let summary = stderr
        .find(&format!("process {gone}: not recorded"))
        .expect("said in the summary");
    assert!(said_first < summary, "{stderr}");
}

/// Where no pid of the list can be recorded, the exit status is the first failure's.
#[test]
fn a_list_of_pids_none_recordable_exits_with_the_first_failure() {
    let mut exited = Command::new("true").spawn().unwrap();
    let gone = exited.id();
    exited.wait().unwrap();
    let not_python = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    let run = |pids: String, quiet: bool| {
        gilsample()
            .args(["--pid", &pids, "-o"])
            .arg(dir.path())
            .args(quiet.then_some("-q"))
            .output()
            .unwrap()
    };
    for (pids, first_failure, quiet) in [
        (format!("{gone},{not_python}"), NO_SUCH_PROCESS, false),
        (format!("{not_python},{gone}"), UNSUPPORTED, true),
    ] {
        let out = run(pids, quiet);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(first_failure), "{stderr}");
        // Each refusal is said once, as it happens (with -q too: they are errors), and the error
        // at the end sums them up instead of saying the first again.
        for pid in [gone, not_python] {
            let said = format!("gilsample: skipping process {pid}: ");
            assert_eq!(stderr.matches(&said).count(), 1, "{stderr}");
            assert_eq!(
                stderr.matches(&format!("process {pid} ")).count(),
                1,
                "{stderr}"
            );
        }
        assert!(
            stderr.contains("error: none of the 2 processes given could be recorded"),
            "{stderr}"
        );
    }
}

#[test]
fn eight_targets_share_sampler_threads_and_one_exiting_disturbs_no_other() {
    let python = interpreter("3.12");
    let mut workloads: Vec<Workload> = (0..7)
        .map(|_| Workload::start(&python, &["sleeper"]))
        .collect();
    let (mut leaver, _) = KilledOnDrop::spawn_until_first_line(
        python
            .workload_command(&["contention", "--threads", "1", "--exit-on-stdin"])
            .stdin(Stdio::piped()),
    );
    let exiting = leaver.id();
    let mut pids: Vec<String> = workloads.iter().map(|w| w.pid.to_string()).collect();
    pids.push(exiting.to_string());
    let dir = tempfile::tempdir().unwrap();
    let mut recording = Recording::spawn(
        gilsample()
            // Long enough that the leaver is gone well before the end even when eight real-time
            // samplers and the other tests starve the session thread that announces the starts.
            .args(["--pid", &pids.join(","), "--duration", "8", "--merge", "-o"])
            .arg(dir.path()),
    );
    // Once all eight are sampled (`ready`), one target leaves.
    recording.wait_until("ready", None);
    std::io::Write::write_all(leaver.stdin.as_mut().unwrap(), b"bye\n").unwrap();
    leaver.wait().unwrap();
    let (status, stderr) = recording.finish();
    assert!(status.success(), "{stderr}");
    let mut traced: Vec<u32> = workloads.iter().map(|w| w.pid).collect();
    traced.push(exiting);
    workloads.clear();
    let mut threads = HashSet::new();
    for pid in traced {
        let trace = Trace::load(&dir.path().join(format!("GIL_{pid}_rank_0.json")));
        // Eight targets at 10 kHz: more than one sampler thread takes (4), fewer threads than
        // targets unless every thread was overloaded.
        let on_thread = trace.other("sampler_thread_targets").as_u64().unwrap();
        assert!((1..=4).contains(&on_thread), "pid {pid}: {on_thread}");
        threads.insert(trace.other("sampler_thread").as_u64().unwrap());
        let expected = if pid == exiting {
            "TargetExited"
        } else {
            "Duration"
        };
        assert_eq!(
            trace.other("end_reason").as_str(),
            Some(expected),
            "pid {pid}"
        );
        assert!(trace.other("rate_achieved_hz").as_f64().unwrap() > 0.0);
        assert!(trace.other("sampler_cpu_seconds").as_f64().unwrap() > 0.0);
        assert!(
            trace
                .other("sampler_moved_off_holder_cpu")
                .as_u64()
                .is_some(),
            "pid {pid}: no count of moves off the holder's CPU"
        );
        // A stall is a read that took longer than a period: counted iff its length is.
        let period_us = (1e6 / trace.other("rate_requested_hz").as_f64().unwrap()) as u64;
        let stalls = trace.other("stalled_reads").as_u64().unwrap();
        let longest_us = trace.other("longest_stall_us").as_u64().unwrap();
        assert_eq!(
            stalls == 0,
            longest_us == 0,
            "pid {pid}: {stalls} stalls, longest {longest_us} µs"
        );
        assert!(
            stalls == 0 || longest_us >= period_us,
            "pid {pid}: longest stall {longest_us} µs, period {period_us} µs"
        );
    }
    assert!((2..=8).contains(&threads.len()), "{threads:?}");
    let merged = Trace::load(&dir.path().join("GIL_merged.json"));
    let named: HashSet<u64> = merged.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(named.len(), 8, "one process track per target");
    assert!(
        merged.value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "process_name"
                && e["args"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("Python 3.12")
                && e["args"]["name"]
                    .as_str()
                    .unwrap()
                    .contains(&format!(" pid {exiting}")))
    );
}

#[test]
fn subprocesses_records_every_python_child_including_later_ones() {
    let python = interpreter("3.12");
    let dir = tempfile::tempdir().unwrap();
    let out = succeeded(
        gilsample()
            .args(["--subprocesses", "--quiet", "-o"])
            .arg(dir.path())
            .arg("--")
            .args(&python.command)
            .arg(&python.workload)
            .args(["sleeper", "--spawn", "2"]),
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 3, "launcher and two children: {lines:?}");
    let launcher = ready_pid(&lines[0]);
    // The answers tell the children from the process that started them (same command line).
    let report = gilsample().arg("report").arg(dir.path()).output().unwrap();
    let said = String::from_utf8_lossy(&report.stdout);
    for line in &lines[1..] {
        let child = ready_pid(line);
        assert!(
            said.contains(&format!("process {child} (host "))
                && said.contains(&format!("child of {launcher})")),
            "{said}"
        );
        let trace = Trace::load(&dir.path().join(format!("GIL_{child}_rank_0.json")));
        assert!(
            trace.events().iter().any(|e| e.name == "take_gil"),
            "child {child} has no waits"
        );
    }
}

/// A Python process of the sid root in its own PID and mount namespace (`unshare` + `chroot`, like a
/// container), with its pid as this process sees it. It is its namespace's init, which ignores every
/// signal but SIGKILL. Dropping `Contained` kills `unshare`, and `--kill-child` takes the target with
/// it: killing the target itself would make `unshare` (util-linux 2.38) try to re-raise SIGKILL on
/// itself and print "sigprocmask unblock failed: Invalid argument".
struct Contained {
    /// Kept for its drop.
    _unshare: KilledOnDrop,
    pid: u32,
}

fn containerized_python() -> Contained {
    let root = sid_root();
    common::interpreter("sid-3.14"); // stages the workload script inside the root
    let (unshare, line) = KilledOnDrop::spawn_until_first_line(
        Command::new("unshare")
            .args(["--pid", "--mount", "--fork", "--kill-child"])
            .arg(format!("--mount-proc={}", root.join("proc").display()))
            .arg("chroot")
            .arg(&root)
            .args([
                "/usr/bin/python3.14",
                "/tmp/gil_workload.py",
                "contention",
                "--threads",
                "2",
            ]),
    );
    assert_eq!(ready_pid(&line), 1, "the target is pid 1 of its namespace");
    let children = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        unshare.id(),
        unshare.id()
    ))
    .unwrap();
    Contained {
        pid: children.split_whitespace().next().unwrap().parse().unwrap(),
        _unshare: unshare,
    }
}

#[test]
fn container_target_recorded_from_the_host_without_bpf_privileges() {
    let contained = containerized_python();
    let pid = contained.pid;
    let dir = tempfile::tempdir().unwrap();
    let command = format!(
        "exec {} --pid {pid} --duration 0.3 --quiet -o {}",
        env!("CARGO_BIN_EXE_gilsample"),
        dir.path().display()
    );
    let out = Command::new("capsh")
        .args([
            "--drop=cap_bpf,cap_perfmon,cap_sys_admin",
            "--",
            "-c",
            &command,
        ])
        .output()
        .unwrap();
    let live_tids: HashSet<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    drop(contained);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = Trace::load(&dir.path().join(format!("GIL_{pid}_rank_0.json")));
    assert_eq!(trace.other("namespace_pid").as_u64(), Some(1));
    let tids: HashSet<u32> = trace.events().iter().map(|e| e.tid).collect();
    for tid in &tids {
        assert!(
            live_tids.contains(tid),
            "tid {tid} is not one of the target's threads as seen from here"
        );
    }
    assert!(trace.events().iter().any(|e| e.name == "take_gil"));
}

#[test]
fn inside_a_container_with_ptrace_but_no_bpf_privileges() {
    let root = sid_root();
    common::interpreter("sid-3.14");
    let binary = root.join("tmp/gilsample");
    let staged = tempfile::NamedTempFile::new_in(root.join("tmp")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_gilsample"), staged.path()).unwrap();
    let _ = staged.persist(&binary);
    let out_dir = format!("/tmp/out-{}", std::process::id());
    let fifo = format!("/tmp/ready-{}", std::process::id());
    let _ = std::fs::remove_file(root.join(fifo.trim_start_matches('/')));
    // Inside: start the target, wait for its READY through a FIFO, then record it with BPF, perfmon
    // and sys_admin dropped from every capability set.
    let script = format!(
        "mkfifo {fifo} && (/usr/bin/python3.14 /tmp/gil_workload.py contention --threads 2 > {fifo} &) && \
         read line < {fifo} && pid=$(echo \"$line\" | sed 's/.*\"pid\": \\([0-9]*\\).*/\\1/') && \
         setpriv --bounding-set -bpf,-perfmon,-sys_admin --inh-caps -bpf,-perfmon,-sys_admin \
         /tmp/gilsample --pid $pid --duration 0.3 --quiet -o {out_dir}; echo rc=$?; grep CapBnd /proc/self/status"
    );
    let out = Command::new("unshare")
        .args(["--pid", "--mount", "--fork"])
        .arg(format!("--mount-proc={}", root.join("proc").display()))
        .arg("chroot")
        .arg(&root)
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("rc=0"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = root.join(out_dir.trim_start_matches('/'));
    let trace = Trace::load_single(&dir);
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
    let _ = std::fs::remove_dir_all(&dir);
}
