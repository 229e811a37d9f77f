//! `hookinbox generate --out-dir DIR` (hidden): writes the man page and the shell
//! completions from the same clap definitions the binary parses, so they never drift from
//! it. The packaging script runs it; nothing is generated at build time.

use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Writes `hookinbox.1`, `hookinbox.bash`, `_hookinbox` (zsh) and `hookinbox.fish`.
pub fn run(out_dir: &Path, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut cmd = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    write(out_dir, "hookinbox.1", &page, out)?;
    for (shell, file) in [
        (Shell::Bash, "hookinbox.bash"),
        (Shell::Zsh, "_hookinbox"),
        (Shell::Fish, "hookinbox.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, "hookinbox", &mut script);
        write(out_dir, file, &script, out)?;
    }
    Ok(())
}

fn write(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    writeln!(out, "wrote {}", path.display())?;
    Ok(())
}
