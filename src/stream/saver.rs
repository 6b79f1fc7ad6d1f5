//! Saving a stream while sampling: the sampler thread only encodes into memory; a writer thread
//! owns the file. A slow or full disk then delays the file, never a tick.
//!
//! Chunks hold whole records, so a recording killed between two writes leaves a file that ends at a
//! record boundary: the reader reads it to there and reports it did not end cleanly (no End). What
//! a crash loses is the chunk not yet handed over, at most CHUNK_BYTES.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{Item, StreamHeader, StreamWriter};
use crate::error::Error;

/// Bytes gathered before a chunk goes to the writer thread: about 2.5 s of 4 threads at 10 kHz
/// (docs/sample-stream.md, "Size"), so the hand-over costs nothing measurable per sample.
pub const CHUNK_BYTES: usize = 256 << 10;

/// What `finish` saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaveStats {
    /// Bytes in the file.
    pub bytes: u64,
    /// Items pushed (the header not counted).
    pub items: u64,
}

/// Saves a sample stream while sampling: encodes in the sampler's thread, writes the file on a
/// thread of its own (module docs).
pub struct SampleSaver {
    path: PathBuf,
    writer: StreamWriter,
    buf: Vec<u8>,
    items: u64,
    bytes: u64,
    chunks: Option<Sender<Vec<u8>>>,
    /// Written chunks come back to be refilled: no allocation per chunk once two are in flight.
    spare: Receiver<Vec<u8>>,
    failed: Arc<AtomicBool>,
    why: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl SampleSaver {
    /// Creates (truncates) `path` now, so a path that cannot be written is refused before sampling.
    pub fn create(path: &Path, header: StreamHeader) -> Result<SampleSaver, Error> {
        crate::trace::output::make_parent_dirs(path)?;
        let file = File::create(path).map_err(|e| Error::Output {
            path: path.to_path_buf(),
            why: format!("cannot create the sample stream: {e}"),
        })?;
        let (chunks, todo) = channel::<Vec<u8>>();
        let (give_back, spare) = channel::<Vec<u8>>();
        let failed = Arc::new(AtomicBool::new(false));
        let why = Arc::new(Mutex::new(None));
        let thread = {
            let (failed, why) = (failed.clone(), why.clone());
            std::thread::Builder::new()
                .name("gilsample-save".into())
                .spawn(move || write_chunks(file, todo, give_back, &failed, &why))
                .map_err(|e| Error::io("starting the sample stream's writer thread", e))?
        };
        let mut writer = StreamWriter::new(header);
        let mut buf = Vec::with_capacity(CHUNK_BYTES + 4096);
        writer.start(&mut buf);
        Ok(SampleSaver {
            path: path.to_path_buf(),
            writer,
            buf,
            items: 0,
            bytes: 0,
            chunks: Some(chunks),
            spare,
            failed,
            why,
            thread: Some(thread),
        })
    }

    /// Encodes `item`; hands a full chunk to the writer thread without waiting for it.
    pub fn push(&mut self, item: &Item) {
        self.writer.push(item, &mut self.buf);
        self.items += 1;
        if self.buf.len() >= CHUNK_BYTES {
            self.send();
        }
    }

    /// Whether writing failed already (the sampler may stop early; `finish` says why).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn send(&mut self) {
        let next = match self.spare.try_recv() {
            Ok(mut v) => {
                v.clear();
                v
            }
            Err(_) => Vec::with_capacity(CHUNK_BYTES + 4096),
        };
        let full = std::mem::replace(&mut self.buf, next);
        self.bytes += full.len() as u64;
        if let Some(chunks) = &self.chunks {
            // A send fails only when the writer thread is gone, which `finish` reports.
            let _ = chunks.send(full);
        }
    }

    /// Writes what is left, waits for the writer thread and reports what was saved, or the write
    /// error (with the path) that cut the stream short.
    pub fn finish(mut self) -> Result<SaveStats, Error> {
        if !self.buf.is_empty() {
            self.send();
        }
        drop(self.chunks.take());
        let panicked = self.thread.take().map(|t| t.join().is_err()) == Some(true);
        let why = self.why.lock().map(|w| w.clone()).unwrap_or(None);
        match (why, panicked) {
            (Some(why), _) => Err(Error::Output {
                path: self.path.clone(),
                why: format!("{why}; the sample stream is incomplete"),
            }),
            (None, true) => Err(Error::Output {
                path: self.path.clone(),
                why: "the sample stream's writer thread failed; the stream is incomplete".into(),
            }),
            (None, false) => Ok(SaveStats {
                bytes: self.bytes,
                items: self.items,
            }),
        }
    }
}

fn write_chunks(
    mut file: File,
    todo: Receiver<Vec<u8>>,
    give_back: Sender<Vec<u8>>,
    failed: &AtomicBool,
    why: &Mutex<Option<String>>,
) {
    for chunk in todo {
        // After a failure the rest is dropped: a stream with a hole in it would decode later samples
        // against the wrong previous one, while a stream cut short is read up to the cut.
        if !failed.load(Ordering::Relaxed)
            && let Err(e) = file.write_all(&chunk)
        {
            if let Ok(mut w) = why.lock() {
                *w = Some(format!("writing the sample stream failed: {e}"));
            }
            failed.store(true, Ordering::Relaxed);
        }
        let _ = give_back.send(chunk);
    }
    if !failed.load(Ordering::Relaxed)
        && let Err(e) = file.flush()
    {
        if let Ok(mut w) = why.lock() {
            *w = Some(format!("writing the sample stream failed: {e}"));
        }
        failed.store(true, Ordering::Relaxed);
    }
}
