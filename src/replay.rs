//! `gilsample replay`: inference rerun on a saved sample stream (stream/), written as the trace the
//! recording wrote. Inference is pure (infer/engine.rs) and the stream holds every reading it used,
//! so the slices are the live run's; a rule changed since gives the trace the new rule gives.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::cli::ReplayArgs;
use crate::error::{Error, Result};
use crate::infer::classify::Basis;
use crate::infer::engine::{Engine, StacksFirst};
use crate::infer::findings::Finding;
use crate::infer::sample::Sample;
use crate::observed::{KernelState, syscall_name};
use crate::record::recorded_process::RecordedProcess;
use crate::record::target::{Pace, write_trace};
use crate::record::{RecordReport, TargetReport};
use crate::sampler::priority::Scheduling;
use crate::sampler::report::{EndReason, SamplerReport};
use crate::stream::{Item, StreamReader};
use crate::summary::{answers, format_summary};
use crate::trace::chrome::ChromeWriter;
use crate::trace::output::check_file_output;

/// `gilsample replay`: reruns inference on a saved sample stream and writes its trace and summary,
/// as the live run did (or explains each thread's decision with `--explain`).
pub fn run(args: &ReplayArgs) -> Result<()> {
    let mut reader = StreamReader::open(&args.input)?;
    let stream_bytes = std::fs::metadata(&args.input).map(|m| m.len()).unwrap_or(0);
    let header = reader.header().clone();
    let process: RecordedProcess =
        serde_json::from_value(header.process.clone()).map_err(|e| Error::Input {
            path: args.input.clone(),
            why: format!("the header's description of the process does not read: {e}"),
        })?;
    let default_name = format!(
        "GIL_{}_rank_{}.replay.json",
        process.pid,
        process.file_rank()
    );
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(&default_name));
    check_file_output(&output, args.force, &default_name)?;
    let writer = ChromeWriter::create(
        &output,
        args.force,
        process.pid,
        process.monotonic_to_trace_offset_ns,
    )?;
    let mut explain = match &args.explain {
        Some(path) => Some(Explainer::create(path)?),
        None => None,
    };
    let mut failure = None;
    let pace = (args.force, Pace::AsFastAsTheWriter);
    let target = write_trace(&process, writer, pace, |sink, writer_failed| {
        let mut engine = Engine::new(header.context.clone());
        if explain.is_some() {
            engine.explain();
        }
        let explain = explain.as_mut();
        let (mut report, error) = replay(&mut reader, &mut engine, sink, writer_failed, explain);
        // The saved report was written before the stream's size was known.
        report.saved_bytes = stream_bytes;
        failure = error;
        report
    })?
    .complete()?;
    if let Some(explain) = explain {
        explain.finish()?;
    }
    if let Some(error) = failure {
        if !args.quiet {
            crate::stderr_line!(
                "gilsample: {} holds what the stream had before the problem below",
                target.path.display()
            );
        }
        return Err(error);
    }
    if !reader.ended_cleanly() && !args.quiet {
        crate::stderr_line!(
            "gilsample: {} ends without the recording's end record (the recording was cut off): \
             the trace holds every sample it has",
            args.input.display()
        );
    }
    if !args.quiet {
        print_summary(target, process.rate_requested_hz, args.verbose);
    }
    Ok(())
}

/// Feeds every item of the stream to `engine` and `sink` in the order the live sampler did
/// (`StacksFirst`: the stacks read for a sample follow it in the stream). Returns the report saved at the end, with inference's counts from this run, and
/// what stopped the replay early, if anything did.
fn replay(
    reader: &mut StreamReader<BufReader<File>>,
    engine: &mut Engine,
    sink: &mut dyn FnMut(Finding),
    writer_failed: &AtomicBool,
    mut explain: Option<&mut Explainer>,
) -> (SamplerReport, Option<Error>) {
    let mut stacks_first = StacksFirst::default();
    let mut saved: Option<SamplerReport> = None;
    let mut samples = 0u64;
    let mut first: Option<u64> = None;
    let mut last = 0u64;
    let mut failure: Option<Error> = None;
    loop {
        if writer_failed.load(Ordering::Relaxed) {
            break;
        }
        let item = match reader.next() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => {
                failure = Some(e.into());
                break;
            }
        };
        match item {
            Item::Sample(sample) => {
                stacks_first.step(engine, &sample, sink);
                if let Some(explain) = explain.as_deref_mut()
                    && let Err(e) = explain.write(&sample, engine)
                {
                    failure = Some(e);
                    break;
                }
                samples += 1;
                first.get_or_insert(sample.t_ns);
                last = sample.t_ns;
            }
            item @ (Item::Stack(_) | Item::HoldFrames { .. }) => {
                if let Some(finding) = item.into_stack_finding() {
                    sink(finding);
                }
            }
            Item::End(report) => {
                match serde_json::from_value(report) {
                    Ok(report) => saved = Some(report),
                    Err(e) => crate::stderr_line!(
                        "gilsample: {}: the recording's report at the end does not read ({e}): \
                         its counts are left out",
                        reader.path().display()
                    ),
                }
                break;
            }
            Item::Header(_) => {}
        }
    }
    stacks_first.release(sink);
    engine.finish(sink);
    // A stream cut off has no saved report: what the samples themselves say stands in.
    let mut report = saved.unwrap_or_else(|| SamplerReport {
        samples,
        end_ns: last,
        end: EndReason::Failed("the recording was cut off".into()),
        ..SamplerReport::new(first.unwrap_or(0), Scheduling::Inherited)
    });
    report.inference = engine.counts();
    (report, failure)
}

/// `--explain`: every thread of every sample as a JSON line.
struct Explainer {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Explainer {
    fn create(path: &Path) -> Result<Explainer> {
        let file = File::create(path).map_err(|e| Error::Output {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        Ok(Explainer {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    fn write(&mut self, sample: &Sample, engine: &Engine) -> Result<()> {
        for (seen, why) in engine.explained() {
            let thread = &sample.threads[*seen];
            let line = json!({
                "t_ns": sample.t_ns,
                "tid": thread.tid,
                "kernel": thread.kernel.map(kernel_json),
                "holds": sample.holds(thread),
                "released_last": !sample.word.locked && thread.tstate == sample.word.last_holder,
                "switch": sample.word.switch_number,
                "locked": sample.word.locked,
                // glibc's waiter counts (take, drop), before and after the kernel readings.
                "waiters": sample.waiters.map(|w| [w.take, w.drop]),
                "waiters_again": sample.waiters_again.map(|w| [w.take, w.drop]),
                // The holder let the GIL go between the reads (infer/held_blocked.rs).
                "let_go_during_reads": sample.holder_let_go_during_reads(),
                "owns_gil_mutex": sample.mutex_owner.map(|o| o == thread.their_tid),
                "schedstat": thread.schedstat.map(|s| [s.cpu_ns, s.run_queue_ns, s.timeslices]),
                "state": why.state.to_string(),
                "basis": why.basis.name(),
                "rule": why.basis.rule(),
                "after": match why.basis {
                    Basis::Ambiguous { after } => Some(after.to_string()),
                    _ => None,
                },
            });
            writeln!(self.out, "{line}").map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn error(&self, e: std::io::Error) -> Error {
        Error::Output {
            path: self.path.clone(),
            why: e.to_string(),
        }
    }

    fn finish(mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.error(e))
    }
}

fn print_summary(target: TargetReport, rate_hz: f64, verbose: bool) {
    let report = RecordReport {
        targets: vec![target],
        failures: Vec::new(),
        skipped: Vec::new(),
        launchers: Vec::new(),
        merged: None,
        command: None,
        samplers_pinned: false,
    };
    let answers = answers(&report);
    crate::stderr_text!("{}", format_summary(&report, &answers, verbose, rate_hz));
}

/// A kernel state as `--explain` writes it: `"running"`, `"blocked"`, or the system call a thread is
/// asleep in, by name and number, with its first two arguments (for futex: the address, the operation).
fn kernel_json(state: KernelState) -> Value {
    match state {
        KernelState::Running => json!("running"),
        KernelState::Blocked => json!("blocked"),
        KernelState::InSyscall { nr, arg0, arg1 } => {
            json!({"syscall": syscall_name(nr), "nr": nr, "arg0": arg0, "arg1": arg1})
        }
    }
}
