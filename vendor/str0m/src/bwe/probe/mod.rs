mod cluster;
mod control;
mod estimator;

pub use cluster::{ProbeClusterConfig, ProbeClusterState, ProbeKind};
pub use control::{BandwidthLimitedCause, ProbeControl};
pub use estimator::ProbeEstimator;
