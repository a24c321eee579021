//! Fault isolation at the participant boundary: a panic while handling one
//! participant's input (in str0m or in our code) is caught here, so that it
//! costs that participant and not the thread that hosts everyone else.
//!
//! [`isolate`] runs a closure and turns a panic into an `Err` carrying the
//! panic's message and, when the process's panic hook reports it through
//! [`note_location`], where it happened. While a closure runs under
//! [`isolate`], [`active`] is true on this thread: the server's panic hook uses
//! it to stay quiet about a panic that will be caught and logged once by the
//! caller (with the participant it concerns).
//!
//! Must not: decide what happens to the participant (the caller evicts it) or
//! log (the caller knows who it was).

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A caught panic: its message and, when known, its source location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caught {
    pub message: String,
    pub location: Option<String>,
}

impl std::fmt::Display for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(l) => write!(f, "{} (at {l})", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

/// True while this thread runs a closure under [`isolate`].
pub fn active() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Called by the panic hook for a panic inside [`isolate`]: where it happened.
pub fn note_location(location: String) {
    LOCATION.with(|l| *l.borrow_mut() = Some(location));
}

/// Runs `f`; a panic inside it becomes `Err`. The caller must treat whatever
/// state `f` was mutating as broken (str0m's `Rtc` included) and drop it.
pub fn isolate<R>(f: impl FnOnce() -> R) -> Result<R, Caught> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    r.map_err(|payload| {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panic with a non-text payload".to_string()
        };
        Caught {
            message,
            location: LOCATION.with(|l| l.borrow_mut().take()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catches_and_reports() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            if active() {
                note_location(info.location().map(|l| l.to_string()).unwrap_or_default());
            }
        }));
        assert_eq!(isolate(|| 7), Ok(7));
        let e = isolate(|| -> u8 { panic!("boom {}", 3) }).unwrap_err();
        std::panic::set_hook(prev);
        assert_eq!(e.message, "boom 3");
        assert!(e.location.unwrap().contains("guard.rs"));
        assert!(!active());
    }
}
