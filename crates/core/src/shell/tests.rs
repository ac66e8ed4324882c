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
