//! Faults the tests inject, in one type: a participant whose handling
//! panics (fault isolation), a shard that fails outside any participant (a
//! dead shard), a shard loop that stalls (socket dwell). They exist only in
//! a build with the `fault-injection` feature, which the test command turns
//! on; in any other build [`Faults`] is empty and every check below is a
//! constant the compiler removes, so a release binary has no test flag, no
//! test environment variable and nothing to compare per datagram.
//!
//! Owns the faults' settings and the checks the engine and the shard make.
//! Must not: act on them (the engine panics inside its guard, the shard
//! sleeps or panics in its loop) or read a clock.

#[cfg(feature = "fault-injection")]
pub use enabled::Faults;

#[cfg(not(feature = "fault-injection"))]
pub use disabled::Faults;

#[cfg(feature = "fault-injection")]
mod enabled {
    use std::time::Duration;

    /// What to break, set from the server's `--test-*` flags.
    #[derive(Clone, Debug, Default)]
    pub struct Faults {
        /// A participant with this display name panics inside its own
        /// input handling once connected.
        pub panic_participant: Option<String>,
        /// The shard that gets a participant of this room panics outside
        /// any participant.
        pub fail_shard_room: Option<String>,
        /// The shard loop sleeps `.1` every `.0` datagrams.
        pub stall: Option<(u64, Duration)>,
        datagrams: u64,
    }

    impl Faults {
        /// No faults.
        pub fn none() -> Self {
            Self::default()
        }

        pub fn new(
            panic_participant: Option<String>,
            fail_shard_room: Option<String>,
            stall: Option<(u64, Duration)>,
        ) -> Self {
            Faults {
                panic_participant,
                fail_shard_room,
                stall,
                datagrams: 0,
            }
        }

        /// Whether a participant joining with `name` is to panic once connected
        /// (asked once per join, not per datagram).
        pub fn panics(&self, name: &str) -> bool {
            self.panic_participant.as_deref() == Some(name)
        }

        /// Whether a shard that gets a participant of room `room` fails.
        pub fn fails_shard(&self, room: &str) -> bool {
            self.fail_shard_room.as_deref() == Some(room)
        }

        /// Counts one datagram; how long to stall now, if at all.
        pub fn stall_after_datagram(&mut self) -> Option<Duration> {
            let (every, pause) = self.stall?;
            self.datagrams += 1;
            self.datagrams.is_multiple_of(every.max(1)).then_some(pause)
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
mod disabled {
    use std::time::Duration;

    /// No faults: this build has no `fault-injection` feature.
    #[derive(Clone, Debug, Default)]
    pub struct Faults;

    impl Faults {
        /// No faults.
        pub fn none() -> Self {
            Faults
        }

        #[inline(always)]
        pub fn panics(&self, _name: &str) -> bool {
            false
        }

        #[inline(always)]
        pub fn fails_shard(&self, _room: &str) -> bool {
            false
        }

        #[inline(always)]
        pub fn stall_after_datagram(&mut self) -> Option<Duration> {
            None
        }
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_fault_fires_where_it_is_set() {
        let mut f = Faults::new(
            Some("boom".into()),
            Some("doom".into()),
            Some((3, Duration::from_millis(2))),
        );
        assert!(f.panics("boom") && !f.panics("alice"));
        assert!(f.fails_shard("doom") && !f.fails_shard("room"));
        let stalls: Vec<_> = (0..6).map(|_| f.stall_after_datagram()).collect();
        assert_eq!(stalls.iter().filter(|s| s.is_some()).count(), 2);
        assert_eq!(stalls[2], Some(Duration::from_millis(2)));
        assert_eq!(Faults::default().stall_after_datagram(), None);
    }
}
