//! str0m-netem 0.4 with str0m 0.25's `Bitrate` and `DataSize`, under the
//! names str0m 0.25's integration tests import from `netem` (0.5). See
//! Cargo.toml. Written for corelay; it wraps 0.4 and adds no emulation.

use std::time::{Duration, Instant};

pub use netem04::{GilbertElliot, Input, LossModel, Output, Probability, RandomLoss, WithLen};
pub use str0m_proto::{Bitrate, DataSize};

/// 0.4's configuration, with a link whose rate and buffer are str0m's types.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetemConfig(netem04::NetemConfig);

impl NetemConfig {
    pub const fn new() -> Self {
        NetemConfig(netem04::NetemConfig::new())
    }

    pub fn wifi() -> Self {
        NetemConfig(netem04::NetemConfig::wifi())
    }

    pub fn wifi_lossy() -> Self {
        NetemConfig(netem04::NetemConfig::wifi_lossy())
    }

    pub fn wifi_congested() -> Self {
        NetemConfig(netem04::NetemConfig::wifi_congested())
    }

    pub fn cellular() -> Self {
        NetemConfig(netem04::NetemConfig::cellular())
    }

    pub fn satellite() -> Self {
        NetemConfig(netem04::NetemConfig::satellite())
    }

    pub fn congested() -> Self {
        NetemConfig(netem04::NetemConfig::congested())
    }

    pub fn latency(self, latency: Duration) -> Self {
        NetemConfig(self.0.latency(latency))
    }

    pub fn jitter(self, jitter: Duration) -> Self {
        NetemConfig(self.0.jitter(jitter))
    }

    pub fn delay_correlation(self, correlation: Probability) -> Self {
        NetemConfig(self.0.delay_correlation(correlation))
    }

    pub fn loss(self, loss: impl Into<LossModel>) -> Self {
        NetemConfig(self.0.loss(loss))
    }

    pub fn duplicate(self, probability: Probability) -> Self {
        NetemConfig(self.0.duplicate(probability))
    }

    pub fn reorder_gap(self, gap: u32) -> Self {
        NetemConfig(self.0.reorder_gap(gap))
    }

    /// A bottleneck of `rate` with a tail-drop buffer of `buffer`.
    pub fn link(self, rate: Bitrate, buffer: DataSize) -> Self {
        let rate = netem04::Bitrate::from(rate.as_f64());
        let buffer = netem04::DataSize::bytes(buffer.as_bytes_i64());
        NetemConfig(self.0.link(rate, buffer))
    }

    pub fn seed(self, seed: u64) -> Self {
        NetemConfig(self.0.seed(seed))
    }
}

/// 0.4's emulator, configured with [`NetemConfig`].
pub struct Netem<T>(netem04::Netem<T>);

impl<T: Clone + WithLen> Netem<T> {
    pub fn new(config: NetemConfig) -> Self {
        Netem(netem04::Netem::new(config.0))
    }

    pub fn handle_input(&mut self, input: Input<T>) {
        self.0.handle_input(input)
    }

    pub fn poll_output(&mut self) -> Option<Output<T>> {
        self.0.poll_output()
    }

    pub fn poll_timeout(&self) -> Instant {
        self.0.poll_timeout()
    }

    pub fn queue_len(&self) -> usize {
        self.0.queue_len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn set_config(&mut self, config: NetemConfig) {
        self.0.set_config(config.0)
    }
}
