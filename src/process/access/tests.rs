//! Why access to a target is refused, as `explain` words it for each set of facts.

use super::*;

const ALL_CAPS: u64 = 0x1ff_ffff_ffff;

fn root() -> Credentials {
    Credentials {
        permitted: ALL_CAPS,
        effective: ALL_CAPS,
        bounding: ALL_CAPS,
        ..Credentials::default()
    }
}

fn facts(reader: Credentials, target: Credentials) -> Facts {
    Facts {
        reader,
        target: Some(target),
        target_pid: 4242,
        target_proc_owner: Some(0),
        binary: "/opt/gilsample".into(),
        ..Facts::default()
    }
}

fn user_creds(uid: u32) -> Credentials {
    Credentials {
        uids: [uid; 4],
        gids: [uid; 4],
        bounding: ALL_CAPS,
        ..Credentials::default()
    }
}

#[test]
fn status_lines_are_parsed() {
    let c = Credentials::parse(
        "Name:\tx\nPPid:\t7\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t5\t5\t5\n\
         CapPrm:\t000001fffeffffff\nCapEff:\t0000000000080000\nSeccomp:\t2\n",
    );
    assert_eq!(c.uids, [1000, 1001, 1002, 1003]);
    assert_eq!(c.gids, [5; 4]);
    assert_eq!(c.permitted, 0x1fffeffffff);
    assert_eq!(c.bounding, 0);
    assert!(c.has_ptrace_capability());
    assert!(!c.has_nice_capability());
    assert_eq!((c.seccomp, c.parent), (2, 7));
    // Root on a GPU VM whose control group refused it SCHED_FIFO: the capability is there.
    let root = Credentials::parse("CapEff:\t000001fffeffffff\n");
    assert!(root.has_nice_capability() && root.has_ptrace_capability());
}

#[test]
fn another_users_process_says_whose_and_never_mentions_yama_without_it() {
    let text = explain(&facts(user_creds(1000), root()));
    assert!(text.contains("runs as user 0"), "{text}");
    assert!(text.contains("gilsample as user 1000"), "{text}");
    let setcap = "setcap cap_sys_ptrace,cap_dac_read_search,cap_sys_nice+ep /opt/gilsample";
    assert!(text.contains(setcap), "{text}");
    assert!(!text.contains("ptrace_scope"), "{text}");
}

#[test]
fn another_users_process_with_cap_sys_ptrace_alone_needs_cap_dac_read_search() {
    // The README's old recipe: the memory reads, the owner-only syscall files do not.
    let mut reader = user_creds(1000);
    reader.effective = 1 << CAP_SYS_PTRACE;
    let text = explain(&facts(reader.clone(), user_creds(1001)));
    assert!(
        text.contains("with CAP_SYS_PTRACE but without CAP_DAC_READ_SEARCH"),
        "{text}"
    );
    assert!(text.contains("/proc/4242/task/TID/syscall"), "{text}");
    assert!(text.contains("run it as user 1001"), "{text}");
    assert!(text.contains("cap_dac_read_search"), "{text}");
    // Root with SYS_PTRACE alone (a container's capabilities dropped but that one), in a
    // bounding set without it to gain: the container's fix.
    let mut root_alone = root();
    root_alone.effective = 1 << CAP_SYS_PTRACE;
    root_alone.bounding = 1 << CAP_SYS_PTRACE;
    let text = explain(&facts(root_alone, user_creds(1001)));
    assert!(text.contains("--cap-add DAC_READ_SEARCH"), "{text}");
    // Either capability, or the same user, reads them: no such reason.
    reader.effective |= 1 << CAP_DAC_READ_SEARCH;
    let text = explain(&facts(reader, user_creds(1001)));
    assert!(!text.contains("CAP_DAC_READ_SEARCH"), "{text}");
}

#[test]
fn yama_is_named_with_its_scope_where_the_kernel_has_it() {
    let mut f = facts(user_creds(1000), user_creds(1000));
    f.target_proc_owner = Some(1000);
    f.yama_scope = Some(1);
    let text = explain(&f);
    assert!(text.contains("ptrace_scope is 1"), "{text}");
    assert!(!text.contains("runs as"), "same user: {text}");
    f.reader_is_ancestor = true;
    assert!(!explain(&f).contains("ptrace_scope is 1"));
    f.yama_scope = Some(3);
    assert!(explain(&f).contains("until the machine is rebooted"));
}

#[test]
fn root_without_the_capability_is_told_it_was_dropped_not_to_run_as_root() {
    let mut dropped = root();
    dropped.permitted &= !(1 << CAP_SYS_PTRACE);
    dropped.effective = dropped.permitted;
    let text = explain(&facts(dropped.clone(), root()));
    assert!(text.contains("capabilities that gilsample lacks"), "{text}");
    assert!(!text.contains("run gilsample as root"), "{text}");
    // Another user's process, read by a root whose bounding set lacks it (a container's
    // default): not root again, nor setcap, which the bounding set caps.
    dropped.bounding = dropped.permitted;
    let text = explain(&facts(dropped, user_creds(65534)));
    assert!(text.contains("root's capabilities were limited"), "{text}");
    assert!(!text.contains("run gilsample as root"), "{text}");
    assert!(!text.contains("sudo setcap"), "{text}");
    assert!(text.contains("--cap-add SYS_PTRACE"), "{text}");
    assert!(text.contains("run it as user 65534"), "{text}");
}

#[test]
fn a_capable_root_is_told_of_seccomp_or_a_security_module() {
    let mut filtered = root();
    filtered.seccomp = 2;
    let text = explain(&facts(filtered, root()));
    assert!(text.contains("seccomp filter"), "{text}");
    assert!(!text.contains("run gilsample as root"), "{text}");
    let mut confined = facts(root(), root());
    confined.reader_label = Some("docker-default (enforce)".into());
    assert!(explain(&confined).contains("docker-default (enforce)"));
    let text = explain(&facts(root(), root()));
    assert!(text.contains("not visible from inside"), "{text}");
}

#[test]
fn a_capable_reader_in_a_user_namespace_is_told_its_capability_stops_there() {
    let mut f = facts(root(), user_creds(65534));
    f.reader_in_user_namespace = Some("0 100000 65536".into());
    let text = explain(&f);
    assert!(
        text.contains("user namespace (uid_map 0 100000 65536)"),
        "{text}"
    );
}
