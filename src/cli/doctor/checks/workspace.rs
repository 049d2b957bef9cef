//! The workspace root: writable (a file made and removed) and with room.

use super::super::Check;
use crate::config::Config;

const AREA: &str = "workspace";

/// Less free space than this is worth a warning: one clone can take it.
const LOW_SPACE: u64 = 1 << 30;

pub fn check(config: &Config) -> Vec<Check> {
    let root = &config.workspace_root;
    let shown = root.display().to_string();
    let probe = || -> std::io::Result<()> {
        std::fs::create_dir_all(root)?;
        let file = root.join(format!(".codex-bridge-doctor-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)?;
        std::fs::remove_file(&file)
    };
    if let Err(e) = probe() {
        return vec![Check::fail(
            AREA,
            "writable",
            format!("cannot write in {shown}: {e}"),
            "make workspace_root a directory the server's user can write",
        )];
    }
    let mut out = vec![Check::ok(AREA, "writable", shown)];
    out.push(match rustix::fs::statvfs(root.as_path()) {
        Ok(s) => {
            let free = s.f_bavail.saturating_mul(s.f_frsize);
            let gib = free as f64 / (1u64 << 30) as f64;
            if free < LOW_SPACE {
                Check::warn(
                    AREA,
                    "free space",
                    format!("{gib:.2} GiB free"),
                    "free some space: every task clones its repository here",
                )
            } else {
                Check::ok(AREA, "free space", format!("{gib:.1} GiB free"))
            }
        }
        Err(e) => Check::warn(AREA, "free space", format!("cannot tell: {e}"), ""),
    });
    out
}
