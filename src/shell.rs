//! Shell completions and the man page, written from the clap tree (`args::Cli`), so that they
//! name every command and option the binary takes and nothing else: `r3 completions SHELL` and
//! `r3 man`, which `scripts/setup` installs. (clap's own generators, `clap_complete` and
//! `clap_mangen`, are not among the crates this project builds from; what r3 needs of them is
//! small: words to complete, and a page that lists them with their help.)

use clap::{Arg, ArgAction, Command, ValueHint};

/// The shells `r3 completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The options of `cmd` that a user types (hidden ones left out), with `--help` and
/// `--version` where clap adds them.
fn options(cmd: &Command) -> Vec<&Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .collect()
}

/// The subcommands a user types, by every name they answer to.
fn subcommands(cmd: &Command) -> Vec<&Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect()
}

/// Whether an option is followed by a value.
fn takes_value(a: &Arg) -> bool {
    !matches!(
        a.get_action(),
        ArgAction::SetTrue
            | ArgAction::SetFalse
            | ArgAction::Count
            | ArgAction::Help
            | ArgAction::HelpShort
            | ArgAction::HelpLong
            | ArgAction::Version
    )
}

/// The values an option takes where clap knows them all (`--space free|grid`).
fn values(a: &Arg) -> Vec<String> {
    a.get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect()
}

/// Whether an option's value is a path: its value name or hint says so.
fn is_path(a: &Arg) -> bool {
    matches!(
        a.get_value_hint(),
        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath | ValueHint::ExecutablePath
    ) || a.get_value_names().is_some_and(|names| {
        names.iter().any(|n| {
            let n = n.as_str();
            n.contains("DIR") || n.contains("FILE") || n.ends_with(".json") || n == "EXE"
        })
    })
}

/// Every spelling of an option: `--long`, its visible aliases, `-s`.
fn spellings(a: &Arg) -> Vec<String> {
    let mut out: Vec<String> = a.get_long().map(|l| format!("--{l}")).into_iter().collect();
    out.extend(
        a.get_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{l}")),
    );
    out.extend(a.get_short().map(|s| format!("-{s}")));
    out
}

/// The completion script for `shell`.
pub fn completions(cmd: &Command, shell: Shell) -> String {
    match shell {
        Shell::Bash => bash(cmd),
        // zsh runs the bash function through its bashcompinit.
        Shell::Zsh => format!(
            "#compdef r3\nautoload -U +X bashcompinit && bashcompinit\n{}",
            bash(cmd)
        ),
        Shell::Fish => fish(cmd),
    }
}

/// A single-quoted word for a shell script.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn bash(cmd: &Command) -> String {
    let name = cmd.get_name();
    let mut s = format!(
        "# bash completion for {name}, written by `{name} completions bash` from its command tree\n\
         _{name}() {{\n\
         \x20 local cur prev sub i\n\
         \x20 cur=\"${{COMP_WORDS[COMP_CWORD]}}\"\n\
         \x20 prev=\"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         \x20 sub=\"\"\n\
         \x20 for ((i = 1; i < COMP_CWORD; i++)); do\n\
         \x20   case \"${{COMP_WORDS[i]}}\" in -*) ;; *) sub=\"${{COMP_WORDS[i]}}\"; break ;; esac\n\
         \x20 done\n"
    );
    // An option's value first: its values, a path, or nothing to suggest.
    s += "  case \"$prev\" in\n";
    let mut seen = std::collections::BTreeSet::new();
    let all = std::iter::once(cmd).chain(subcommands(cmd));
    for c in all {
        for a in options(c).into_iter().filter(|a| takes_value(a)) {
            let words = spellings(a).join("|");
            if !seen.insert(words.clone()) {
                continue;
            }
            let vals = values(a);
            let body = if !vals.is_empty() {
                format!(
                    "COMPREPLY=($(compgen -W {} -- \"$cur\"))",
                    quoted(&vals.join(" "))
                )
            } else if is_path(a) {
                "COMPREPLY=($(compgen -f -- \"$cur\"))".to_string()
            } else {
                "COMPREPLY=()".to_string()
            };
            s += &format!("    {words}) {body}; return ;;\n");
        }
    }
    s += "  esac\n  case \"$sub\" in\n";
    let global: Vec<String> = options(cmd).iter().flat_map(|a| spellings(a)).collect();
    for c in subcommands(cmd) {
        let mut names = vec![c.get_name().to_owned()];
        names.extend(c.get_visible_aliases().map(str::to_owned));
        let mut words: Vec<String> = options(c).iter().flat_map(|a| spellings(a)).collect();
        words.extend(positional_values(c));
        words.extend(global.iter().cloned());
        words.sort();
        words.dedup();
        s += &format!(
            "    {}) COMPREPLY=($(compgen -W {} -- \"$cur\")) ;;\n",
            names.join("|"),
            quoted(&words.join(" "))
        );
    }
    let mut top: Vec<String> = subcommands(cmd)
        .iter()
        .map(|c| c.get_name().to_owned())
        .collect();
    top.extend(global);
    s += &format!(
        "    *) COMPREPLY=($(compgen -W {} -- \"$cur\")) ;;\n  esac\n}}\ncomplete -o default -F _{name} {name}\n",
        quoted(&top.join(" "))
    );
    s
}

fn fish(cmd: &Command) -> String {
    let name = cmd.get_name();
    let subs: Vec<&Command> = subcommands(cmd);
    let all: Vec<String> = subs.iter().map(|c| c.get_name().to_owned()).collect();
    let mut s = format!(
        "# fish completion for {name}, written by `{name} completions fish` from its command tree\n\
         complete -c {name} -f\n"
    );
    let help = |a: &Arg| {
        a.get_help()
            .map(|h| first_sentence(&h.to_string()))
            .unwrap_or_default()
    };
    let line = |cond: &str, a: &Arg| {
        let mut l = format!("complete -c {name} -n {}", quoted(cond));
        if let Some(long) = a.get_long() {
            l += &format!(" -l {long}");
        }
        for alias in a.get_visible_aliases().unwrap_or_default() {
            l += &format!(" -l {alias}");
        }
        if let Some(short) = a.get_short() {
            l += &format!(" -s {short}");
        }
        if takes_value(a) {
            let vals = values(a);
            if !vals.is_empty() {
                l += &format!(" -x -a {}", quoted(&vals.join(" ")));
            } else if is_path(a) {
                l += " -r -F";
            } else {
                l += " -x";
            }
        }
        l + &format!(" -d {}\n", quoted(&help(a)))
    };
    for c in &subs {
        s += &format!(
            "complete -c {name} -n {} -a {} -d {}\n",
            quoted(&format!(
                "not __fish_seen_subcommand_from {}",
                all.join(" ")
            )),
            c.get_name(),
            quoted(&about(c))
        );
    }
    for a in options(cmd) {
        s += &line("true", a);
    }
    for c in &subs {
        let seen = format!("__fish_seen_subcommand_from {}", c.get_name());
        let vals = positional_values(c);
        if !vals.is_empty() {
            s += &format!(
                "complete -c {name} -n {} -a {}\n",
                quoted(&seen),
                quoted(&vals.join(" "))
            );
        }
        for a in options(c) {
            s += &line(&seen, a);
        }
    }
    s
}

/// The values a command's arguments take where clap knows them all (`completions SHELL`).
fn positional_values(c: &Command) -> Vec<String> {
    c.get_arguments()
        .filter(|a| a.is_positional() && !a.is_hide_set())
        .flat_map(values)
        .collect()
}

/// A command's one-line description.
fn about(c: &Command) -> String {
    c.get_about()
        .map(|a| first_sentence(&a.to_string()))
        .unwrap_or_default()
}

/// The first sentence of a help text, on one line.
fn first_sentence(text: &str) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.find(". ") {
        Some(i) => one[..=i].to_owned(),
        None => one,
    }
}

/// Text as roff reads it: a backslash doubled, a line's leading dot or quote escaped, and
/// dashes that are minus signs in options.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An option as the page shows it: `\-\-budget <BUDGET>`, with its help and default.
fn option_entry(a: &Arg) -> String {
    let mut head = spellings(a).join(", ");
    if takes_value(a) {
        let vals = values(a);
        let shown = if vals.is_empty() {
            a.get_value_names()
                .and_then(|n| n.first().map(|n| n.to_string()))
                .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
        } else {
            vals.join("|")
        };
        head += &format!(" <{shown}>");
    }
    let mut body = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty())
        .collect();
    if !defaults.is_empty() && takes_value(a) {
        body += &format!(" [default: {}]", defaults.join(", "));
    }
    format!(".TP\n\\fB{}\\fR\n{}\n", roff(&head), roff(body.trim()))
}

/// The man page (section 1): what r3 is, its global options, and each command with its
/// arguments and options, from the same tree `--help` prints.
pub fn man_page(cmd: &Command, version: &str) -> String {
    let name = cmd.get_name();
    let mut s = format!(
        ".TH {} 1 \"\" \"{name} {}\" \"User Commands\"\n",
        name.to_uppercase(),
        roff(version)
    );
    s += &format!(
        ".SH NAME\n{name} \\- {}\n",
        roff(&cmd.get_about().map(|a| a.to_string()).unwrap_or_default())
    );
    s += &format!(
        ".SH SYNOPSIS\n\\fB{name}\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n.br\n\\fBr3\\-clang++\\fR [\\fIclang arguments\\fR] [\\fB\\-\\-r3\\-apply\\fR[=\\fIFILE\\fR]] [\\fB\\-\\-r3\\-store\\fR=\\fIDIR\\fR] [\\fB\\-\\-r3\\-off\\fR]\n.br\n\\fB{name}\\fR [\\fIcache\\fR] \\fIcompiler\\fR [\\fIarguments\\fR]\n"
    );
    if let Some(long) = cmd.get_long_about() {
        s += &format!(".SH DESCRIPTION\n{}\n", roff(&long.to_string()));
    }
    s += ".SH OPTIONS\n";
    for a in options(cmd) {
        s += &option_entry(a);
    }
    s += ".SH COMMANDS\n";
    for c in subcommands(cmd) {
        let positionals: Vec<String> = c
            .get_arguments()
            .filter(|a| a.is_positional() && !a.is_hide_set())
            .map(|a| {
                let n = a
                    .get_value_names()
                    .and_then(|n| n.first().map(|n| n.to_string()))
                    .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
                if a.is_required_set() {
                    format!("<{n}>")
                } else {
                    format!("[{n}]")
                }
            })
            .collect();
        s += &format!(
            ".SS \"{name} {} {}\"\n{}\n",
            c.get_name(),
            roff(&positionals.join(" ")),
            roff(
                &c.get_long_about()
                    .or(c.get_about())
                    .map(|a| a.to_string())
                    .unwrap_or_default()
            )
        );
        let opts: Vec<&Arg> = options(c)
            .into_iter()
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version") && !a.is_global_set())
            .collect();
        if !opts.is_empty() {
            s += ".RS\n";
            for a in opts {
                s += &option_entry(a);
            }
            s += ".RE\n";
        }
    }
    s += &format!(
        ".SH EXIT STATUS\n\
         0 when the command did what was asked; 1 when it failed, or found what it checks wrong \
         (\\fB{name} doctor\\fR, \\fBselftest\\fR, \\fBreplay\\fR, \\fBexport \\-\\-check\\fR, \
         \\fBtune \\-\\-dry\\-run\\fR); 2 for a command line clap cannot read; 130 when \
         \\fBtune\\fR or \\fBevolve\\fR was stopped by Ctrl\\-C (what was measured is kept). \
         \\fB{name} record\\fR exits as the recorded program did. As a compiler driver, r3 exits \
         as clang does.\n\
         .SH FILES\n\
         \\fI~/.local/share/r3\\fR (the default store), \\fI<build>/.r3/config\\fR (a build tree's \
         settings), \\fI~/.cache/r3\\fR (r3's cache and the CUDA SDK of scripts/setup).\n\
         .SH SEE ALSO\n\
         \\fBclang\\fR(1); \\fB{name} <command> \\-\\-help\\fR; README.md and docs/ in r3's sources.\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn words_of_every_command(cmd: &Command) -> Vec<(String, Vec<String>)> {
        subcommands(cmd)
            .into_iter()
            .map(|c| {
                (
                    c.get_name().to_owned(),
                    options(c).iter().flat_map(|a| spellings(a)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn completions_name_every_command_and_option_of_the_tree() {
        let cmd = crate::args::Cli::command();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = completions(&cmd, shell);
            for (sub, opts) in words_of_every_command(&cmd) {
                assert!(script.contains(&sub), "{shell:?}: {sub}");
                for o in opts {
                    let bare = o.trim_start_matches('-');
                    assert!(script.contains(bare), "{shell:?}: {sub} {o}");
                }
            }
            // r3's own workers are no command a user types.
            assert!(!script.contains("__lower"), "{shell:?}");
        }
        let bash = completions(&cmd, Shell::Bash);
        assert!(bash.contains("--space) COMPREPLY=($(compgen -W 'free grid'"));
        assert!(bash.contains("complete -o default -F _r3 r3"));
    }

    #[test]
    fn the_man_page_lists_every_command_and_escapes_roff() {
        let cmd = crate::args::Cli::command();
        let page = man_page(&cmd, "0.1.0 (abc)");
        assert!(page.starts_with(".TH R3 1 "), "{page}");
        for (sub, _) in words_of_every_command(&cmd) {
            assert!(page.contains(&format!(".SS \"r3 {sub}")), "{sub}");
        }
        assert!(
            page.contains("\\-\\-budget"),
            "options' dashes are minus signs"
        );
        assert!(page.contains(".SH EXIT STATUS"));
        // No line of text starts a roff request by accident.
        for line in page.lines().filter(|l| !l.starts_with('.')) {
            assert!(!line.starts_with('\''), "{line}");
        }
        assert_eq!(roff(".x 'y\n-z"), "\\&.x 'y\n\\-z");
    }
}
