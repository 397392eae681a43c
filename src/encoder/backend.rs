//! The only file that names a burn backend: which device the encoder runs on.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;

use crate::error::{Error, Result, UserError};

/// Where the encoder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// burn's pure-Rust `flex` CPU backend (the default).
    #[default]
    Cpu,
    /// burn-cuda on the GPU with this index (needs the `cuda` feature).
    Cuda(usize),
}

impl DeviceKind {
    /// The burn device.
    pub fn device(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::flex()),
            #[cfg(feature = "cuda")]
            DeviceKind::Cuda(i) => Ok(Device::cuda(i)),
            #[cfg(not(feature = "cuda"))]
            DeviceKind::Cuda(_) => Err(UserError::DeviceUnavailable {
                requested: self.to_string(),
                fix: "this kindred was built without GPU support; rebuild with \
                      `cargo build --release --features cuda`, or use --device cpu"
                    .into(),
            }
            .into()),
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || UserError::InvalidArgument {
            name: "device",
            reason: format!("{s:?}; use cpu, cuda or cuda:N"),
        };
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" => Ok(DeviceKind::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(DeviceKind::Cuda)
                .ok_or_else(|| bad().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices_and_explains_bad_ones() {
        assert_eq!("cpu".parse::<DeviceKind>().expect("cpu"), DeviceKind::Cpu);
        assert_eq!(
            "cuda".parse::<DeviceKind>().expect("cuda"),
            DeviceKind::Cuda(0)
        );
        assert_eq!(
            "cuda:3".parse::<DeviceKind>().expect("cuda:3"),
            DeviceKind::Cuda(3)
        );
        let err = "gpu"
            .parse::<DeviceKind>()
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("use cpu, cuda or cuda:N"), "{err}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_rebuild() {
        let err = DeviceKind::Cuda(0)
            .device()
            .expect_err("no cuda")
            .to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }
}
