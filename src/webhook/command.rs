//! Reads the command of a mentioning comment: `@bot /word argument`.
//!
//! Only the first mention of the bot counts, and only a `/word` right after
//! it (whitespace between them, or the `:`/`,` Gitea allows after a name), so
//! "@bot please look at /stop in the router" is an instruction, not a stop.
//! The text is the one a reader sees: a `/word` in code or a link never
//! counts, as a mention there never does ([`mention::after_first_mention`]).
//! The word ends at whitespace or the end of the text (`/src/main.rs` is a
//! path, not the command `src`), and it is matched ignoring case.

use super::mention;
use crate::domain::command::{Command, CommandLine};

/// The command `body` gives `login`, or `None` for an instruction (or a
/// comment that does not mention `login` at all).
pub fn parse(body: &str, login: &str) -> Option<CommandLine> {
    read(&mention::after_first_mention(body, login)?)
}

/// The command in `after`, the text right after the bot's first mention
/// ([`mention::after_first_mention`]); `None` for an instruction.
pub fn read(after: &str) -> Option<CommandLine> {
    // The mention's terminator: `:` or `,` count only before whitespace,
    // which Gitea requires of them too.
    let rest = after
        .strip_prefix([':', ','])
        .filter(|r| r.starts_with(char::is_whitespace))
        .unwrap_or(after);
    let trimmed = rest.trim_start();
    if trimmed.len() == rest.len() && !rest.is_empty() {
        // Nothing between the name and the next character (`@bot/x` never
        // scans as a mention, but a terminator like `'` or `)` can).
        return None;
    }
    let word_and_rest = trimmed.strip_prefix('/')?;
    let end = word_and_rest
        .find(char::is_whitespace)
        .unwrap_or(word_and_rest.len());
    let word = word_and_rest.get(..end)?;
    if !is_command_word(word) {
        return None;
    }
    let argument = word_and_rest.get(end..).unwrap_or_default().trim();
    Some(CommandLine {
        command: Command::from_word(word),
        word: word.to_ascii_lowercase(),
        argument: argument.to_owned(),
    })
}

/// A letter, then letters, digits or `-`: what a command could be named.
/// Anything else after `/` (a path, a number, a link-like token) is text. No
/// `_`: Markdown reads `/a_b_` as emphasis, so the word a reader sees is cut.
fn is_command_word(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-')
        && word.len() <= 32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, FileFailurePersistence};

    fn cmd(body: &str) -> Option<Command> {
        parse(body, "ccbot").map(|c| c.command)
    }

    #[test]
    fn a_word_right_after_the_mention_is_the_command() {
        assert_eq!(cmd("@ccbot /stop"), Some(Command::Stop));
        assert_eq!(cmd("@CCBot /STOP"), Some(Command::Stop));
        assert_eq!(cmd("hey @ccbot: /status please"), Some(Command::Status));
        assert_eq!(cmd("@ccbot,\n/cancel"), Some(Command::Cancel));
        assert_eq!(cmd("@ccbot /frobnicate now"), Some(Command::Unknown));
        let line = parse("@ccbot /approve  appr-12 now", "ccbot").unwrap();
        assert_eq!(line.command, Command::Approve);
        assert_eq!(line.first_argument(), Some("appr-12"));
        let line = parse("@ccbot /steer also fix the docs\nand tests", "ccbot").unwrap();
        assert_eq!(line.argument, "also fix the docs\nand tests");
    }

    #[test]
    fn anything_else_is_an_instruction() {
        for body in [
            "@ccbot please look at /stop in the router",
            "@ccbot /src/main.rs panics",
            "@ccbot /123",
            "@ccbot fix it /stop",
            "@other /stop @ccbot",
            "`@ccbot /stop`",
            "```\n@ccbot /stop\n```",
            "[@ccbot /stop](https://x)",
            "@ccbot `/stop`",
            "@ccbot",
            "no mention /stop",
            "@ccbot:/stop",
            "@ccbot /stop_now",
        ] {
            assert_eq!(cmd(body), None, "{body:?}");
        }
    }

    #[test]
    fn only_the_first_mention_counts() {
        assert_eq!(cmd("@ccbot do this. later @ccbot /stop"), None);
        assert_eq!(cmd("@ccbot /reset then @ccbot /stop"), Some(Command::Reset));
    }

    fn config() -> Config {
        Config {
            failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
                "tests/proptest-regressions/webhook_command.txt",
            ))),
            ..Config::default()
        }
    }

    fn words() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(
                Command::ALL
                    .iter()
                    .filter(|c| **c != Command::Unknown)
                    .map(|c| c.as_str().to_owned())
                    .collect::<Vec<_>>()
            ),
            "[a-zA-Z][a-zA-Z0-9-]{0,10}",
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn never_panics(body in ".{0,200}", login in "[a-z]{0,4}") {
            let _ = parse(&body, &login);
        }

        #[test]
        fn a_generated_command_is_read_back(
            lead in "([a-z]{1,6} ){0,2}",
            sep in prop::sample::select(vec![" ", "\n", "\t", ": ", ", ", "  "]),
            word in words(),
            upper in any::<bool>(),
            arg in "( [a-z0-9 ]{0,20})?",
        ) {
            let typed = if upper { word.to_uppercase() } else { word.clone() };
            let body = format!("{lead}@ccbot{sep}/{typed}{arg}");
            let line = parse(&body, "ccbot");
            prop_assert!(line.is_some(), "{:?}", body);
            let line = line.unwrap();
            prop_assert_eq!(line.command, Command::from_word(&word));
            prop_assert_eq!(&line.word, &word.to_ascii_lowercase());
            prop_assert_eq!(line.argument.as_str(), arg.trim());
        }

        #[test]
        fn a_command_in_code_or_a_link_never_counts(
            word in words(),
            wrap in prop::sample::select(vec![
                "`{}`", "```\n{}\n```", "[{}](https://x)", "<https://x/{}>", "    {}",
            ]),
        ) {
            let inner = format!("@ccbot /{word}");
            let body = wrap.replace("{}", &inner);
            prop_assert_eq!(parse(&body, "ccbot"), None, "{:?}", body);
        }

        #[test]
        fn words_after_other_text_are_instructions(
            filler in "[a-z]{1,10}",
            word in words(),
        ) {
            let body = format!("@ccbot {filler} /{word}");
            prop_assert_eq!(parse(&body, "ccbot"), None);
        }

        #[test]
        fn a_command_for_someone_else_is_not_ours(word in words(), other in "[a-z]{1,8}") {
            prop_assume!(other != "ccbot");
            let body = format!("@{other} /{word}");
            prop_assert_eq!(parse(&body, "ccbot"), None);
        }
    }
}
