//! Commands that read their arguments again, as shell code or as arithmetic, where the
//! gateway's single quotes no longer keep a value data: `bash -c '(( $1 > 3 ))' _ {n}` with
//! `n = a[$(touch /tmp/pwn)]` runs the `touch`. A placeholder in a simple command that names
//! one of them (anywhere in it: `sudo -u x bash -c …`, `find … -exec sh -c …`, `env bash`) is
//! refused unless its schema makes it an integer, a boolean or an enum.

/// Commands any of whose arguments may be read again as code: shells (a script, `-c` code or
/// its positional parameters), `eval` and its kin, commands that join their arguments into a
/// command line for a shell (`ssh`, `su`, `runuser`, `xargs`, `parallel`, `watch`, `script`).
const CODE: [&str; 25] = [
    "eval", "source", ".", "trap", "alias", "sh", "bash", "rbash", "dash", "ash", "zsh", "ksh",
    "mksh", "yash", "fish", "csh", "tcsh", "busybox", "ssh", "su", "runuser", "xargs", "parallel",
    "watch", "script",
];

/// Bash builtins that evaluate their arguments (or the subscripts of the names they are
/// given) as arithmetic: `let`, `unset 'a[$(…)]'`, `read`/`mapfile` into `a[…]`.
const ARITHMETIC: [&str; 6] = ["let", "unset", "read", "mapfile", "readarray", "getopts"];

/// Declaration builtins: a name's subscript is arithmetic, and with `-i` so is the value.
const DECLARE: [&str; 5] = ["declare", "typeset", "local", "export", "readonly"];

/// Commands that run their arguments through a shell only with one of these options.
const WITH_SHELL: [(&str, &[&str]); 3] = [
    ("sudo", &["-s", "-i", "--shell", "--login"]),
    ("doas", &["-s"]),
    ("flock", &["-c", "--command"]),
];

/// The command (of `words`, a simple command's literal words, quotes removed) that reads the
/// placeholder again, if any. `value_only` is whether the placeholder stands after a `=` in
/// its word (a declaration's value, not a name).
pub(super) fn rereading(words: &[String], value_only: bool) -> Option<&'static str> {
    let named = |w: &String| -> Option<&'static str> {
        let base = w.rsplit('/').next().unwrap_or(w);
        let all = CODE.iter().chain(&ARITHMETIC).chain(&DECLARE);
        all.copied().find(|&c| c == base).or(match base {
            "[[" => Some("[["),
            _ => None,
        })
    };
    let has = |opts: &[&str]| words.iter().any(|w| opts.contains(&w.as_str()));
    for w in words {
        let Some(command) = named(w) else {
            continue;
        };
        // `export NAME={v}`: the value is data unless `-i` makes it arithmetic.
        let integer = words
            .iter()
            .any(|o| o.starts_with('-') && !o.starts_with("--") && o.contains('i'));
        if DECLARE.contains(&command) && value_only && !integer {
            continue;
        }
        return Some(command);
    }
    for (command, opts) in WITH_SHELL {
        if words.iter().any(|w| w == command) && has(opts) {
            return Some(command);
        }
    }
    // `printf -v NAME`, `test -v NAME`, `[ -v NAME ]`: the name's subscript is arithmetic.
    let first = words.first().map(String::as_str);
    if has(&["-v"]) && matches!(first, Some("printf" | "test" | "[")) {
        return first.map(|f| match f {
            "printf" => "printf -v",
            "test" => "test -v",
            _ => "[ -v",
        });
    }
    None
}
