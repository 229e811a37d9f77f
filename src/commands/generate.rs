//! `hookinbox generate --out-dir DIR` (hidden): writes the man page and the shell
//! completions from the same clap definitions the binary parses, so they never drift from
//! it. The packaging script runs it; nothing is generated at build time.
//!
//! The man page also carries the configuration reference, rendered from
//! [`crate::config::reference`], whose tests keep it equal to what the parser accepts.

use std::path::Path;

use anyhow::Context as _;
use clap_complete::Shell;
use clap_mangen::roff::{Roff, bold, italic, roman};

use crate::config::reference::{FORMS, INTRO, SECTIONS};
use crate::manual::IfAbsent;

/// Writes `hookinbox.1`, `hookinbox.bash`, `_hookinbox` (zsh) and `hookinbox.fish` for the
/// command line `cmd` (the binary's own, [`crate::cli::Cli`]).
pub fn run(
    mut cmd: clap::Command,
    out_dir: &Path,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    write(out_dir, "hookinbox.1", &man_page(cmd.clone())?, out)?;
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

/// clap_mangen's sections with COMMANDS (each command's options and examples) and
/// CONFIGURATION after the global options, where man pages put them (before the EXTRA
/// notes and VERSION). Each piece clap_mangen renders starts with its two-line apostrophe
/// preamble, a string definition that may be repeated harmlessly.
fn man_page(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    commands(&cmd).to_writer(&mut page)?;
    configuration().to_writer(&mut page)?;
    if let Some(extra) = cmd.get_after_help() {
        let mut roff = Roff::new();
        roff.control("SH", ["EXTRA"]);
        preformatted(&mut roff, &extra.to_string());
        roff.to_writer(&mut page)?;
    }
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// The COMMANDS section: each command with what it does, its options and its examples,
/// all in this one page. (clap_mangen's SUBCOMMANDS section lists only the names, each
/// pointing at a page of its own, hookinbox-serve(1) and so on, which are not installed.)
fn commands(cmd: &clap::Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        roff.control("SS", [format!("hookinbox {}", sub.get_name()).as_str()]);
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            roff.text([roman(about.to_string())]);
        }
        let args = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set() && a.get_id() != "help");
        for arg in args {
            let takes_values = arg.get_action().takes_values();
            let flag = match (arg.get_short(), arg.get_long()) {
                (_, None) => String::new(),
                (Some(short), Some(long)) => format!("-{short}, --{long}"),
                (None, Some(long)) => format!("--{long}"),
            };
            let values = match arg.get_value_names() {
                Some(names) if takes_values => {
                    names.iter().map(|n| format!(" <{n}>")).collect::<String>()
                }
                _ => String::new(),
            };
            // A positional argument is shown as its value's name alone.
            let values = if flag.is_empty() {
                values.trim_start()
            } else {
                &values
            };
            let mut help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            let choices: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_owned())
                .collect();
            if !choices.is_empty() && takes_values {
                help.push_str(&format!(" [possible values: {}]", choices.join(", ")));
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() && takes_values {
                help.push_str(&format!(" [default: {}]", defaults.join(", ")));
            }
            roff.control("TP", []);
            roff.text([bold(flag), italic(values)]);
            roff.text([roman(help)]);
        }
        if let Some(examples) = sub.get_after_help() {
            roff.control("PP", []);
            preformatted(&mut roff, &examples.to_string());
        }
    }
    roff
}

/// Lines kept as they are written (roff would otherwise fill them into one paragraph).
fn preformatted(roff: &mut Roff, text: &str) {
    roff.control("nf", []);
    for line in text.lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
}

/// The CONFIGURATION section: the forms values take, then each table with its keys.
fn configuration() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["CONFIGURATION"]);
    roff.text([roman(INTRO)]);
    roff.control("SS", ["Values"]);
    for (form, meaning) in FORMS {
        roff.control("TP", []);
        roff.text([italic(*form)]);
        roff.text([roman(*meaning)]);
    }
    for section in SECTIONS {
        roff.control("SS", [section.header]);
        roff.text([roman(section.about)]);
        for key in section.keys {
            let absent = match key.if_absent {
                IfAbsent::Required => "required".to_owned(),
                IfAbsent::Off => "not set by default".to_owned(),
                IfAbsent::Default(value) | IfAbsent::Derived(value) => {
                    format!("default: {value}")
                }
            };
            roff.control("TP", []);
            roff.text([
                bold(key.name),
                roman(" = "),
                italic(key.form),
                roman(format!("  ({absent})")),
            ]);
            roff.text([roman(key.meaning)]);
        }
    }
    roff.control("SS", ["Schemes"]);
    roff.text([roman(format!(
        "A source's scheme is one of: {}. Each one's settings, secret, event identity, \
         handshake and caveats are in providers.md (/usr/share/doc/hookinbox/providers.md).",
        crate::scheme::providers::names().join(", ")
    ))]);
    roff
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
