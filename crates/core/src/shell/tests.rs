//! The template lexer: each refused context, the accepted forms, the error's words.

use super::*;

fn context(template: &str) -> Context {
    match check_command(template) {
        Err(TemplateError::Inside { context, .. }) => context,
        other => panic!("{template:?} gave {other:?}"),
    }
}

#[test]
fn each_quoting_context_is_refused() {
    use Context::*;
    let cases = [
        ("echo '{msg}'", SingleQuotes),
        ("echo \"{msg}\"", DoubleQuotes),
        ("echo \"a\\\"{msg}\"", DoubleQuotes),
        ("echo \"\\{msg}\"", DoubleQuotes),
        ("echo `ls {dir}`", Backticks),
        ("echo \"`ls {dir}`\"", Backticks),
        ("echo $(ls {dir})", CommandSubstitution),
        ("echo \"$(ls {dir})\"", CommandSubstitution),
        ("echo $(echo $(ls) {dir})", CommandSubstitution),
        ("echo $(( {n} + 1 ))", Arithmetic),
        ("echo $(( (1 + {n}) ))", Arithmetic),
        ("echo ${msg}", ParameterExpansion),
        ("echo ${x:-{msg}}", ParameterExpansion),
        ("echo \\{msg}", Backslash),
        ("cat <<EOF\n{msg}\nEOF", HereDocument),
        ("cat <<'EOF' >f\nhi {msg}\nEOF", HereDocument),
        ("cat <<-\"E F\"\n\tE F x\n\t{msg}\n\tE F\n", HereDocument),
        ("cat <<A <<B\nA\n{msg}\nB", HereDocument),
        ("cat <<{msg}\nx", HereDelimiter),
        ("cat <<E{msg}\nx", HereDelimiter),
        ("echo hi # {msg}", Comment),
        ("echo hi;#{msg}", Comment),
        ("#{msg}", Comment),
        // Every `{…}` is a placeholder, as the renderer reads it: here `{' {msg}`.
        ("echo '{' {msg}", SingleQuotes),
    ];
    for (template, expected) in cases {
        assert_eq!(context(template), expected, "{template:?}");
    }
}

#[test]
fn placeholders_in_plain_code_are_accepted() {
    for template in [
        "echo {msg}",
        "ls -l {dir} | wc -l",
        "a={x} b",
        "echo \\\"{msg}\\\"",
        "echo \\\\{msg}",
        "echo 'it'\\''s' \"a\" {msg}",
        "echo \"$(date)\" `date` $((1 + (2))) {msg}",
        "echo $# a#b {msg}",
        "cat <<EOF\nhello $x\nEOF\necho {msg}",
        "cat <<-EOF\n\thello\n\tEOF\necho {msg}",
        "cat <<< {msg}",
        "echo hi # note\necho {msg}",
        "echo a \\\n{msg}",
        "sleep {delay}; printf '%s\\n' {line} >> out.txt; echo appended {line}",
        "sudo systemctl restart -- {service}",
    ] {
        assert_eq!(check_command(template), Ok(()), "{template:?}");
    }
}

#[test]
fn the_error_names_the_placeholder_and_its_column() {
    let err = check_command("echo \"{msg}\"").unwrap_err();
    assert_eq!(
        err,
        TemplateError::Inside {
            placeholder: "{msg}".into(),
            line: 1,
            column: 7,
            context: Context::DoubleQuotes,
        }
    );
    let text = err.to_string();
    assert!(
        text.starts_with("placeholder {msg} at line 1, column 7 stands inside double quotes"),
        "{text}"
    );
    let err = check_command("cd /srv\necho '{msg}'")
        .unwrap_err()
        .to_string();
    assert!(err.contains("{msg} at line 2, column 7"), "{err}");
    let err = check_command("}{a}{").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the { at line 1, column 5 opens a placeholder that no } closes"
    );
}

fn reread(template: &str, typed: &[&str]) -> Context {
    match check_command_typed(template, typed) {
        Err(TemplateError::Reread { context, .. }) => context,
        other => panic!("{template:?} gave {other:?}"),
    }
}

/// Issue 49, point 7: where bash reads a value again (arithmetic, or a command that parses
/// its arguments as code) a placeholder is refused unless its schema types it.
#[test]
fn placeholders_bash_reads_again_are_refused_unless_typed() {
    use Context::*;
    let cases = [
        ("bash -c '(( $1 > 3 ))' _ {n}", Reread("bash")),
        ("(( {n} > 3 ))", ArithmeticCommand),
        (
            "for (( i = 0; i < {n}; i++ )); do echo $i; done",
            ArithmeticCommand,
        ),
        ("let x={n}", Reread("let")),
        ("declare -i x={n}", Reread("declare")),
        ("local -ri x={n}", Reread("local")),
        ("unset {n}", Reread("unset")),
        ("export {n}", Reread("export")),
        ("[[ {n} -eq 3 ]] && echo big", Reread("[[")),
        ("a[{n}]=1", Subscript),
        ("unset a[{n}]", Subscript),
        ("eval echo {n}", Reread("eval")),
        ("sh -c 'echo $1' _ {n}", Reread("sh")),
        ("/usr/bin/zsh -c 'echo $1' x {n}", Reread("zsh")),
        ("dash script.sh {n}", Reread("dash")),
        ("ssh other-host echo {n}", Reread("ssh")),
        ("su -c 'echo hi' {n}", Reread("su")),
        ("sudo -u app bash -c 'echo $1' _ {n}", Reread("bash")),
        ("sudo -s echo {n}", Reread("sudo")),
        ("xargs -0 echo {n}", Reread("xargs")),
        ("find {dir} -exec sh -c 'ls \"$1\"' _ x \\;", Reread("sh")),
        ("printf -v {n} %s x", Reread("printf -v")),
        ("[ -v {n} ]", Reread("[ -v")),
        ("read {n} < /dev/null", Reread("read")),
        ("echo ok; cd /srv && ssh h ls {n}", Reread("ssh")),
    ];
    for (template, expected) in cases {
        assert_eq!(reread(template, &[]), expected, "{template:?}");
        // Typed (an integer, a boolean, an enum), the same placeholder may stand there.
        let typed = ["n", "dir"];
        assert_eq!(
            check_command_typed(template, &typed),
            Ok(()),
            "{template:?}"
        );
    }
    // `$[…]` is quoted open like `$((…))`: refused whatever the type.
    assert_eq!(context("echo $[ {n} + 1 ]"), BracketArithmetic);
    assert_eq!(
        check_command_typed("echo $[ {n} + 1 ]", &["n"]).map_err(|_| ()),
        Err(())
    );
    let err = check_command("bash -c 'exit $1' _ {n}")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("placeholder {n} at line 1, column 21 stands in a command that runs bash"),
        "{err}"
    );
}

#[test]
fn plain_commands_beside_rereading_ones_keep_their_placeholders() {
    for template in [
        "export NAME={v}",
        "local greeting={v}; echo \"$greeting\"",
        "(( 1 > 0 )) && echo {v}",
        "bash -c 'echo hi'; echo {v}",
        "[[ -f /etc/x ]] || echo {v}",
        "sudo systemctl restart -- {v}",
        "ls x[1] {v}",
        "[ {v} = yes ] && echo ok",
        "printf '%s\\n' {v}",
        "find /srv -name {v} -print",
    ] {
        assert_eq!(check_command(template), Ok(()), "{template:?}");
    }
}
