//! SSH command templates at start-up: a placeholder inside quotes (or any other shell context
//! where the gateway's own quoting would not hold) stops the configuration from loading.

use postern_core::config::Config;

use crate::support::CONFIG;

const GATEWAY: &str = "[gateway]\nfingerprint_key = { env = \"K\" }\n";

/// A config with one ssh tool, `say`, whose `command` is the TOML value `command`.
fn with_command(command: &str) -> String {
    format!(
        "{GATEWAY}[credential.k]\nkind = \"ssh_key\"\nsecret = {{ env = \"S\" }}\n[[tool]]\nname = \"say\"\nclass = \"remote_command\"\nmatch_window = \"1m\"\ninput_schema = {{ type = \"object\", properties = {{ msg = {{ type = \"string\" }} }} }}\nssh = {{ host = \"h\", user = \"u\", host_key = \"SHA256:x\", credential = \"k\", command = {command} }}\n"
    )
}

#[test]
fn a_placeholder_inside_double_quotes_stops_the_start_up() {
    let err = Config::parse(&with_command(r#""echo \"{msg}\"""#), "postern.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("postern.toml:7:"),
        "the tool's name line: {err}"
    );
    assert!(
        err.contains("tool \"say\": ssh.command: placeholder {msg} at line 1, column 7 stands inside double quotes"),
        "{err}"
    );

    let err = Config::parse(
        &with_command("'''cd /srv\necho hi # {msg}'''"),
        "postern.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("{msg} at line 2, column 11 stands inside a comment"),
        "{err}"
    );
}

#[test]
fn the_safe_forms_load() {
    for command in [
        r#""echo {msg}""#,
        r#""echo \\\"{msg}\\\"""#,
        "'''printf '%s\\n' {msg} >> out.txt'''",
    ] {
        let text = with_command(command);
        let config =
            Config::parse(&text, "postern.toml").unwrap_or_else(|e| panic!("{command}: {e}"));
        assert_eq!(config.tools.len(), 1);
    }
}

/// The repository's own configs: the starter, the tests' shared one, and the SSH example of
/// docs/ssh.md.
#[test]
fn the_repository_s_configs_still_load() {
    let starter = include_str!("../../../../examples/postern.toml");
    Config::parse(starter, "examples/postern.toml").unwrap();
    Config::parse(CONFIG, "support.toml").unwrap();

    let readme = include_str!("../../../../docs/ssh.md");
    let section = &readme[readme.find("## Remote commands over SSH").unwrap()..];
    let block = &section[section.find("```toml\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    Config::parse(&format!("{GATEWAY}{block}"), "docs/ssh.md").unwrap();
}

/// A config whose ssh tool `cmp` runs `command` with `n` of property schema `n_schema`.
fn reread(command: &str, n_schema: &str) -> String {
    format!(
        "{GATEWAY}[credential.k]\nkind = \"ssh_key\"\nsecret = {{ env = \"S\" }}\n[[tool]]\nname = \"cmp\"\nclass = \"remote_command\"\nmatch_window = \"1m\"\ninput_schema = {{ type = \"object\", properties = {{ n = {n_schema}, msg = {{ type = \"string\" }} }} }}\nssh = {{ host = \"h\", user = \"u\", host_key = \"SHA256:x\", credential = \"k\", command = '''{command}''' }}\n"
    )
}

/// Issue 49, point 7: a placeholder bash reads again (arithmetic, or an argument of a command
/// that parses its arguments as code) stops the start-up, unless its schema types it.
#[test]
fn a_placeholder_bash_reads_again_stops_the_start_up_unless_typed() {
    let forms = [
        ("bash -c '(( $1 > 3 ))' _ {n}", "runs bash"),
        ("(( {n} > 3 )) && echo big", "arithmetic command"),
        ("let x={n}", "runs let"),
        ("declare -i x={n}", "runs declare"),
        ("[[ {n} -eq 3 ]]", "inside [[ … ]]"),
        ("a[{n}]=1", "array subscript"),
        ("eval echo {n}", "runs eval"),
        ("sh -c 'echo $1' _ {n}", "runs sh"),
        ("ssh other echo {n}", "runs ssh"),
        ("su -c 'id' {n}", "runs su"),
        ("sudo -u app bash -c 'echo $1' _ {n}", "runs bash"),
        ("xargs echo {n}", "runs xargs"),
        ("find /srv -exec sh -c 'ls $1' _ {n} ';'", "runs sh"),
    ];
    let string = r#"{ type = "string" }"#;
    for (command, says) in forms {
        let err = Config::parse(&reread(command, string), "postern.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tool \"cmp\": ssh.command: placeholder {n}") && err.contains(says),
            "{command}: {err}"
        );
        for typed in [
            r#"{ type = "integer" }"#,
            r#"{ type = "boolean" }"#,
            r#"{ type = "string", enum = ["small", "big"] }"#,
        ] {
            Config::parse(&reread(command, typed), "postern.toml")
                .unwrap_or_else(|e| panic!("{command} with {typed}: {e}"));
        }
    }
    // Typing one placeholder does not let another, untyped, through.
    let err = Config::parse(
        &reread(
            "bash -c 'echo $1 $2' _ {n} {msg}",
            r#"{ type = "integer" }"#,
        ),
        "postern.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("placeholder {msg}"), "{err}");
}
