//! Property tests of the stream format: arbitrary samples, stacks and hold frames round trip.

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn kernel_state() -> impl Strategy<Value = Option<KernelState>> {
    prop_oneof![
        Just(None),
        Just(Some(KernelState::Running)),
        Just(Some(KernelState::Blocked)),
        (any::<i64>(), any::<u64>(), any::<u64>())
            .prop_map(|(nr, arg0, arg1)| Some(KernelState::InSyscall { nr, arg0, arg1 })),
    ]
}

fn thread_sample() -> impl Strategy<Value = ThreadSample> {
    (
        // Few tids, so threads recur across samples and the delta paths are taken.
        0u32..6,
        prop_oneof![Just(0u64), any::<u64>()],
        kernel_state(),
        proptest::option::of(any::<u64>()),
        proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
        proptest::option::of((any::<bool>(), any::<bool>())),
    )
        .prop_map(|(tid, tstate, kernel, slices, sched, flags)| ThreadSample {
            tid,
            their_tid: tid.wrapping_mul(7),
            tstate: RemoteAddr(tstate),
            kernel,
            slices_before_sleep: slices,
            schedstat: sched.map(|(cpu_ns, run_queue_ns, timeslices)| SchedStat {
                cpu_ns,
                run_queue_ns,
                timeslices,
            }),
            gil_flags: flags.map(|(holds, requested)| GilFlagsReading { holds, requested }),
        })
}

fn sample() -> impl Strategy<Value = Sample> {
    (
        (any::<u64>(), any::<u64>(), any::<bool>(), any::<bool>()),
        (
            any::<u64>(),
            prop_oneof![Just(0u64), any::<u64>()],
            proptest::option::of(any::<u64>()),
        ),
        proptest::option::of((any::<u32>(), any::<u32>())),
        proptest::option::of((0u32..3, 0u32..3)),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(thread_sample(), 0..8),
        any::<prop::sample::Index>(),
        proptest::option::of((
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        )),
    )
        .prop_map(
            |(
                (read_ns, t_ns, locked, all),
                (switch, holder, interval),
                w,
                wa,
                owner,
                threads,
                i,
                again,
            )| {
                // The holder is often one of the threads, as in a real sample.
                let last_holder = match threads.len() {
                    0 => RemoteAddr(holder),
                    n if holder % 2 == 0 => threads[i.index(n)].tstate,
                    _ => RemoteAddr(holder),
                };
                let waiters = |w: Option<(u32, u32)>| w.map(|(take, drop)| Waiters { take, drop });
                Sample {
                    read_ns,
                    // Any value: a stalled read makes it arbitrarily far before read_ns.
                    woke_ns: t_ns ^ read_ns,
                    t_ns,
                    word: GilWord {
                        locked,
                        last_holder,
                        switch_number: switch,
                        interval_us: interval,
                    },
                    waiters: waiters(w),
                    waiters_again: waiters(wa),
                    word_again: again.map(|(locked, holder, switch_number, interval_us)| GilWord {
                        locked,
                        last_holder: RemoteAddr(holder),
                        switch_number,
                        interval_us,
                    }),
                    mutex_owner: owner,
                    all_kernel_read: all,
                    // Mostly the full rate, sometimes the quiet one, now and then anything.
                    skipped_periods: match switch % 7 {
                        0 | 1 => 4,
                        2 => (read_ns % u64::from(crate::stream::MAX_SKIPPED_PERIODS)) as u32,
                        _ => 0,
                    },
                    threads,
                    // Not kept in a stream.
                    unchanged_outside: Vec::new(),
                }
            },
        )
}

fn item() -> impl Strategy<Value = Item> {
    use crate::infer::intervals::GilState;
    prop_oneof![
        6 => sample().prop_map(Item::Sample),
        1 => (
            any::<u32>(),
            any::<u64>(),
            prop::sample::select(vec![
                GilState::Hold,
                GilState::Take,
                GilState::Drop,
                GilState::Released,
                GilState::Unknown,
            ]),
            proptest::collection::vec(".{0,12}", 0..4),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(
                |(tid, t_ns, state, frames, samples, begins_slice)| Item::Stack(StackReading {
                    tid,
                    t_ns,
                    state,
                    frames: frames.into(),
                    samples,
                    begins_slice,
                })
            ),
        1 => (
            any::<(u32, u64, u32, u32, u32, u64)>(),
            proptest::option::of(".{0,12}"),
            proptest::option::of(".{0,12}"),
        )
            .prop_map(
                |((tid, t_ns, reads, still_reads, idle_reads, span_ns), innermost, callee)| {
                    Item::HoldFrames {
                        tid,
                        t_ns,
                        watch: crate::infer::native_call::FrameWatch {
                            reads,
                            still_reads,
                            idle_reads,
                            span_ns,
                            innermost,
                            callee,
                        },
                    }
                }
            ),
    ]
}

proptest! {
    #[test]
    fn arbitrary_item_sequences_round_trip(
        items in proptest::collection::vec(item(), 0..24),
        end in any::<bool>(),
    ) {
        let mut items = items;
        if end {
            items.push(Item::End(json!({"n": items.len()})));
        }
        let bytes = encode(&items);
        let (back, ended) = decode(&bytes).unwrap();
        prop_assert_eq!(back, items);
        prop_assert_eq!(ended, end);
    }
}
