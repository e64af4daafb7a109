//! Man pages and shell completions, generated from the clap definitions of a command.
//!
//! Why generated: the man page and the completions then say exactly what `--help` says, and
//! a new option cannot be forgotten in one of them. Why also committed (under
//! `tools/packaging/generated/`): `cargo deb` packages files that exist before it builds, and a
//! build script cannot reach the clap definitions of a binary of the same package. The
//! hidden `ethbcast generate-assets --out DIR` writes them, and the `packaging` test fails
//! when the committed copies differ from what the binary generates (it says how to refresh
//! them).

use std::io;
use std::path::{Path, PathBuf};

use clap_complete::Shell;

/// The shells whose completions are generated, with the file name each one's loader expects
/// (bash-completion: the command name; zsh: `_` and the name; fish: the name and `.fish`).
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "{}.bash"),
    (Shell::Zsh, "_{}"),
    (Shell::Fish, "{}.fish"),
];

/// Writes the man pages (`NAME.1`, and `NAME-SUB.1` for every visible subcommand) and the
/// completions of `cmd` into `dir`, which is created if missing. Returns the files written,
/// sorted.
pub fn generate(cmd: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let name = cmd.get_name().to_owned();
    let mut written = Vec::new();
    let mut man = cmd.clone().disable_help_subcommand(true);
    man.build();
    written.push(write_man(man.clone(), dir)?);
    for sub in man.get_subcommands().filter(|s| !s.is_hide_set()) {
        // `ethbcast-send(1)`: named as git and cargo name theirs, so `man ethbcast-send` works.
        let full = format!("{name}-{}", sub.get_name());
        let usage = synopsis(&format!("{name} {}", sub.get_name()), sub);
        let page = sub.clone().display_name(full).override_usage(usage);
        written.push(write_man(page, dir)?);
    }
    let mut visible = without_hidden_subcommands(&cmd);
    for (shell, pattern) in SHELLS {
        let path = dir.join(pattern.replace("{}", &name));
        let mut file = std::fs::File::create(&path)?;
        clap_complete::generate(shell, &mut visible, &name, &mut file);
        written.push(path);
    }
    written.sort();
    Ok(written)
}

/// The SYNOPSIS line of `cmd`, run as `name`: every visible option with its value
/// (`--iface <IFACE>`), the required ones first, the others in brackets; positional arguments
/// last. (clap_mangen's own line names options without their values.)
pub fn synopsis(name: &str, cmd: &clap::Command) -> String {
    let shown = |a: &clap::Arg| {
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("-{s}|--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => String::new(),
        };
        let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
        let value = match a.get_value_names() {
            Some(v) => v.join(" "),
            None => a.get_id().as_str().to_uppercase(),
        };
        match (flag.is_empty(), takes_value) {
            (true, _) => format!("<{value}>"),
            (false, true) => format!("{flag} <{value}>"),
            (false, false) => flag,
        }
    };
    let visible: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .collect();
    let mut line = vec![name.to_owned()];
    for a in visible
        .iter()
        .filter(|a| a.is_required_set() && !a.is_positional())
    {
        line.push(shown(a));
    }
    for a in visible
        .iter()
        .filter(|a| !a.is_required_set() && !a.is_positional())
    {
        line.push(format!("[{}]", shown(a)));
    }
    for a in visible.iter().filter(|a| a.is_positional()) {
        let v = shown(a);
        line.push(if a.is_required_set() {
            v
        } else {
            format!("[{v}]")
        });
    }
    line.join(" ")
}

fn write_man(cmd: clap::Command, dir: &Path) -> io::Result<PathBuf> {
    // No date: the pages stay byte-identical from build to build (the version is in the title).
    clap_mangen::Man::new(cmd).date("").generate_to(dir)
}

/// `cmd` without its hidden subcommands (clap_complete would offer them; clap_mangen skips
/// them by itself). A copy with the name, texts, visible arguments and visible subcommands,
/// which is all a completion script is made of.
fn without_hidden_subcommands(cmd: &clap::Command) -> clap::Command {
    let mut copy = clap::Command::new(cmd.get_name().to_owned())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(v) = cmd.get_version() {
        copy = copy.version(v.to_owned());
    }
    if let Some(about) = cmd.get_about() {
        copy = copy.about(about.clone());
    }
    copy
}
