//! A job's candidates loaded ahead of their turn. Loading PTX makes the driver compile it
//! (ptxas, on the CPU), and on an H200 that was 18 ms of a short kernel's 26 ms measurement
//! (`R3_TIMELINE`, 2026-11-29). The worker measures one candidate at a time, so while it
//! measures one, threads of its own assemble and load the next ones into its context
//! (`assemble::load`, as `Session::load` does): the load then finds the module ready.
//!
//! It is the same code path on purpose. Compiling through the driver's linker instead (`cuLink*`)
//! compiles PTX as relocatable code, which keeps calls that a module load inlines: on an H200
//! the same PTX of a kernel with device functions (codegen level 0) ran 0.84× of -O3 linked
//! and 1.22× loaded, and another 0.39× against 0.76× (2026-11-29). Where loading ahead fails,
//! the load loads the PTX itself, and reports its error as it always did.

use cudarc::driver::sys::{self, CUresult};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Threads loading at once, at most: the driver's compiler is single-threaded, and the
/// measurement that runs beside them must keep a core.
const THREADS: usize = 8;

/// Loaded modules by the hash of their PTX, shared with the threads that load them.
#[derive(Default)]
pub struct Ahead {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    slots: Mutex<HashMap<blake3::Hash, Slot>>,
    loaded: Condvar,
}

enum Slot {
    Pending,
    /// The module (a `CUmodule`, as an address), or None where loading it ahead failed.
    Ready(Option<usize>),
}

impl Inner {
    fn slots(&self) -> MutexGuard<'_, HashMap<blake3::Hash, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Ahead {
    /// Starts loading each of `ptxs` not asked for already into the CUDA context `ctx` (a
    /// `CUcontext`, as an address, current on the caller). Modules a job asked for before and
    /// never took are unloaded.
    pub fn load(&self, ctx: usize, ptxs: Vec<String>) {
        let mut slots = self.inner.slots();
        let wanted: Vec<(blake3::Hash, String)> = ptxs
            .into_iter()
            .map(|p| (blake3::hash(p.as_bytes()), p))
            .collect();
        slots.retain(|h, s| {
            let keep = matches!(s, Slot::Pending) || wanted.iter().any(|(w, _)| w == h);
            if let (false, Slot::Ready(Some(module))) = (keep, &*s) {
                // SAFETY: a module this context loaded and nothing took.
                unsafe { sys::cuModuleUnload(*module as sys::CUmodule) };
            }
            keep
        });
        let todo: Vec<(blake3::Hash, String)> = wanted
            .into_iter()
            .filter(|(h, _)| !slots.contains_key(h))
            .collect();
        for (h, _) in &todo {
            slots.insert(*h, Slot::Pending);
        }
        drop(slots);
        let threads = THREADS.min(todo.len());
        // Popped from the end: the first candidate is loaded first.
        let queue = Arc::new(Mutex::new(todo.into_iter().rev().collect::<Vec<_>>()));
        for _ in 0..threads {
            let (inner, queue) = (Arc::clone(&self.inner), Arc::clone(&queue));
            std::thread::spawn(move || {
                // SAFETY: the context is the worker's retained primary context, never released
                // while the process lives.
                if unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) } != CUresult::CUDA_SUCCESS
                {
                    return give_up(&inner, &queue);
                }
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    let Some((hash, ptx)) = next else { return };
                    // SAFETY: a plain driver call on this thread's current context.
                    let module = unsafe { load(&ptx) };
                    inner.slots().insert(hash, Slot::Ready(module));
                    inner.loaded.notify_all();
                }
            });
        }
    }

    /// Unloads every module loaded ahead and never taken (the session ends).
    pub fn unload_untaken(&self) {
        for (_, slot) in self.inner.slots().drain() {
            if let Slot::Ready(Some(module)) = slot {
                // SAFETY: a module this context loaded and nothing took.
                unsafe { sys::cuModuleUnload(module as sys::CUmodule) };
            }
        }
    }

    /// The module of `ptx`, waiting for it while it is being loaded; None where it was never
    /// asked for or could not be loaded ahead (the caller loads the PTX). The caller owns it.
    pub fn take(&self, ptx: &str) -> Option<usize> {
        let hash = blake3::hash(ptx.as_bytes());
        let mut slots = self.inner.slots();
        loop {
            match slots.get(&hash) {
                None => return None,
                Some(Slot::Ready(_)) => {
                    return match slots.remove(&hash) {
                        Some(Slot::Ready(code)) => code,
                        _ => None,
                    }
                }
                Some(Slot::Pending) => {
                    slots = self
                        .inner
                        .loaded
                        .wait(slots)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

/// A thread that cannot load marks what is left of the queue as not loaded, so that no load
/// waits for it.
fn give_up(inner: &Inner, queue: &Mutex<Vec<(blake3::Hash, String)>>) {
    let left: Vec<_> = std::mem::take(&mut *queue.lock().unwrap_or_else(|p| p.into_inner()));
    let mut slots = inner.slots();
    for (hash, _) in left {
        slots.insert(hash, Slot::Ready(None));
    }
    inner.loaded.notify_all();
}

/// `ptx` loaded into the current context, as `Session::load` loads it.
unsafe fn load(ptx: &str) -> Option<usize> {
    crate::assemble::load(ptx).ok().map(|m| m as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_never_asked_for_is_not_waited_for() {
        let ahead = Ahead::default();
        assert!(ahead.take(".version 8.0").is_none());
    }

    #[test]
    fn a_load_waits_for_a_module_being_loaded_and_takes_it_once() {
        let ahead = Ahead::default();
        let hash = blake3::hash(b"ptx");
        ahead.inner.slots().insert(hash, Slot::Pending);
        let inner = Arc::clone(&ahead.inner);
        let compiler = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            inner.slots().insert(hash, Slot::Ready(Some(7)));
            inner.loaded.notify_all();
        });
        assert_eq!(ahead.take("ptx"), Some(7));
        assert_eq!(ahead.take("ptx"), None, "taken once");
        compiler.join().unwrap();
    }

    #[test]
    fn a_module_a_thread_could_not_load_is_left_to_the_load() {
        let ahead = Ahead::default();
        let queue = Mutex::new(vec![(blake3::hash(b"a"), "a".to_owned())]);
        ahead
            .inner
            .slots()
            .insert(blake3::hash(b"a"), Slot::Pending);
        give_up(&ahead.inner, &queue);
        assert_eq!(ahead.take("a"), None);
    }
}
