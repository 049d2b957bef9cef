//! Gitea-compatible `@mention` detection for comment bodies.
//!
//! The bridge must react to a comment exactly when Gitea itself considers the
//! bot mentioned; otherwise people get replies they did not ask for (a login
//! quoted in code, an e-mail address, a URL fragment) or are ignored although
//! Gitea rendered a mention. Gitea decides this in two steps, mirrored here:
//!
//! 1. `modules/markup/mdstripper` parses the Markdown (goldmark) and keeps only
//!    the *raw source* of plain text nodes. Code spans, code blocks, raw HTML,
//!    link text/destinations and autolinks (including bare URLs, which Gitea
//!    linkifies) vanish. A text node whose previous sibling is not a text node
//!    is preceded by a newline, so node boundaries act as whitespace
//!    (`` `x`@bot `` *is* a mention), while adjacent text runs are glued
//!    together (`x@bot`, `\@bot` and `&#64;bot` are not mentions).
//! 2. `modules/references` runs this Go RE2 expression over the stripped text:
//!    `(?:\s|^|\(|\[)(@[-\w][-.\w]*?|@[-\w][-.\w]*?/[-\w][-.\w]*?)(?:\s|$|[:,;.?!](\s|$)|'|\)|\])`
//!    Gitea restarts each search at the end of the previous *name* (not after
//!    the consumed terminator, see `FindAllMentionsBytes`), so in `@a @b` both
//!    users are mentioned. That is the behaviour implemented here, and it is
//!    also what the rendered page shows (both names are linked).
//!
//! Only the HTML *tags* are dropped: text between inline tags, as in
//! `<b>@bot</b>`, is an ordinary text node and does mention, exactly as in
//! Gitea. A whole HTML block (`<div>@bot</div>` on its own line) does not.
//!
//! Deliberate deviations, all in the direction of "what a reader of the
//! rendered page sees":
//! * image alt text (`![@bot](x.png)`) is ignored; goldmark's stripper keeps it
//!   but the page does not render it as a mention;
//! * a hard line break (`two spaces⏎` or `\⏎`) counts as whitespace; current
//!   goldmark glues the next line directly onto the previous text there;
//! * bare-URL detection (`http://`, `https://`, `ftp://`, `www.`) is ASCII
//!   case-insensitive, so the result never depends on letter case.
//!
//! Everything runs in linear time over the body and never panics.

use std::collections::HashSet;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// All user/team names mentioned in a Gitea Markdown body, lower-cased, in order, without duplicates.
///
/// Names are lower-cased because Gitea logins are case-insensitive, so
/// `@Bob` and `@bob` are the same person; duplicates are dropped so callers
/// can notify/act once per name. A team mention `@org/team` is returned as
/// `"org/team"`; it can never equal a user login (logins cannot contain `/`).
pub fn find_mentions(body: &str) -> Vec<String> {
    let text = strip_markdown(body);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for name in scan_mentions(&text) {
        let name = name.to_ascii_lowercase();
        if seen.insert(name.clone()) {
            out.push(name);
        }
    }
    out
}

/// Whether `login` is mentioned in `body` by Gitea's rules (case-insensitive).
///
/// This is the question the webhook handler asks before doing any work: it
/// must agree with Gitea so that the bot answers exactly the comments in which
/// Gitea shows (and notifies) a mention of it. `login` is the bare login
/// without a leading `@`; an empty login is never mentioned.
pub fn mentions(body: &str, login: &str) -> bool {
    if login.is_empty() {
        return false;
    }
    let text = strip_markdown(body);
    let mut names = scan_mentions(&text);
    names.any(|name| name.eq_ignore_ascii_case(login))
}

/// The text a reader sees right after the first mention of `login`: the
/// stripped body (code, links, HTML blocks and bare URLs gone) from the end of
/// that name on. `None` when `login` is not mentioned. A command is read from
/// here, so a `/word` in code or a link never counts, just as a mention there
/// never does.
pub fn after_first_mention(body: &str, login: &str) -> Option<String> {
    if login.is_empty() {
        return None;
    }
    let text = strip_markdown(body);
    let end = scan_mention_spans(&text)
        .find(|(start, end)| {
            text.get(*start..*end)
                .is_some_and(|name| name.eq_ignore_ascii_case(login))
        })
        .map(|(_, end)| end)?;
    text.get(end..).map(str::to_owned)
}

/// Reduces Markdown to the text Gitea's `mdstripper` would feed to the mention
/// pattern: raw text of plain text nodes only, bare URLs removed, node
/// boundaries turned into newlines.
fn strip_markdown(body: &str) -> String {
    // Gitea's web UI sends CRLF; normalise like Gitea's `util.NormalizeEOL`.
    let normalized;
    let src: &str = if body.contains('\r') {
        normalized = body.replace("\r\n", "\n").replace('\r', "\n");
        &normalized
    } else {
        body
    };

    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    options.insert(Options::ENABLE_FOOTNOTES);
    options.insert(Options::ENABLE_DEFINITION_LIST);

    let bytes = src.as_bytes();
    let mut out = String::with_capacity(src.len() + 16);
    // Depth inside containers whose text never counts (links, images, code
    // blocks, HTML blocks, metadata).
    let mut skip_depth: usize = 0;
    // Whether the previous emitted thing was a text node (then the next text
    // node is glued on, as goldmark does for adjacent text siblings).
    let mut prev_text = false;
    // End of the source already accounted for by leaf/end events; used to find
    // backslash escapes, which pulldown-cmark drops but goldmark keeps raw.
    let mut covered_end: usize = 0;

    for (event, range) in Parser::new_ext(src, options).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if matches!(
                    tag,
                    Tag::Link { .. }
                        | Tag::Image { .. }
                        | Tag::CodeBlock(_)
                        | Tag::HtmlBlock
                        | Tag::MetadataBlock(_)
                ) {
                    skip_depth += 1;
                }
                prev_text = false;
                continue;
            }
            Event::End(tag) => {
                if matches!(
                    tag,
                    TagEnd::Link
                        | TagEnd::Image
                        | TagEnd::CodeBlock
                        | TagEnd::HtmlBlock
                        | TagEnd::MetadataBlock(_)
                ) {
                    skip_depth = skip_depth.saturating_sub(1);
                }
                prev_text = false;
            }
            Event::Text(decoded) if skip_depth == 0 => {
                if !prev_text {
                    out.push('\n');
                }
                let start = range.start;
                if start > covered_end && bytes.get(start - 1) == Some(&b'\\') {
                    out.push('\\');
                }
                // Raw source like goldmark's `Text.Value(source)`: entities and
                // escapes are not decoded, so `&#64;bot` stays no mention.
                out.push_str(src.get(range.clone()).unwrap_or(&decoded));
                prev_text = true;
            }
            Event::SoftBreak | Event::HardBreak if skip_depth == 0 => {
                out.push('\n');
            }
            _ => prev_text = false,
        }
        covered_end = covered_end.max(range.end);
    }
    remove_bare_urls(&out)
}

/// Removes what Gitea's linkify extension would turn into autolinks (which the
/// stripper drops): tokens starting with `http://`, `https://`, `ftp://` or
/// `www.` at the start of a line, after whitespace or after one of the
/// linkify trigger characters `*_~(`, up to the next whitespace.
fn remove_bare_urls(text: &str) -> String {
    const PREFIXES: [&[u8]; 4] = [b"http://", b"https://", b"ftp://", b"www."];
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let at_trigger = i == 0
            || bytes
                .get(i - 1)
                .is_some_and(|&c| is_space(c) || matches!(c, b'*' | b'_' | b'~' | b'('));
        let is_url = at_trigger
            && PREFIXES.iter().any(|p| {
                bytes
                    .get(i..i + p.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(p))
            });
        if !is_url {
            i += 1;
            continue;
        }
        let end = bytes[i..]
            .iter()
            .position(|&c| is_space(c))
            .map_or(bytes.len(), |n| i + n);
        // `i` and `end` sit next to ASCII bytes (or the ends), so both are
        // char boundaries; `get` keeps this panic-free regardless.
        out.push_str(text.get(copied..i).unwrap_or_default());
        copied = end;
        i = end;
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    out
}

/// Go RE2 `\s`: `[\t\n\f\r ]` (ASCII only, no vertical tab).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0c' | b'\r')
}

/// Go RE2 `\w` (ASCII only).
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `[-\w]`: first character of a name.
fn is_name_start(c: u8) -> bool {
    is_word(c) || c == b'-'
}

/// `[-.\w]`: any further character of a name.
fn is_name_char(c: u8) -> bool {
    is_name_start(c) || c == b'.'
}

/// `(?:\s|$|[:,;.?!](\s|$)|'|\)|\])` at byte `pos`.
fn terminator_at(bytes: &[u8], pos: usize) -> bool {
    match bytes.get(pos) {
        None => true,
        Some(&c) if is_space(c) || matches!(c, b'\'' | b')' | b']') => true,
        Some(b':' | b',' | b';' | b'.' | b'?' | b'!') => {
            bytes.get(pos + 1).is_none_or(|&c| is_space(c))
        }
        Some(_) => false,
    }
}

/// Lazy `[-\w][-.\w]*?` followed by a terminator, starting at `start`:
/// `Ok(end)` for the shortest name with a terminator at `end`, otherwise
/// `Err(stop)` with the first byte that is neither terminator nor name char.
fn lazy_name(bytes: &[u8], start: usize) -> Result<usize, usize> {
    if !bytes.get(start).is_some_and(|&c| is_name_start(c)) {
        return Err(start);
    }
    let mut pos = start + 1;
    loop {
        if terminator_at(bytes, pos) {
            return Ok(pos);
        }
        match bytes.get(pos) {
            Some(&c) if is_name_char(c) => pos += 1,
            _ => return Err(pos),
        }
    }
}

/// Byte end of the name starting at `start` (just after `@`), trying the user
/// alternative first and then `org/team`, like the RE2 alternation.
fn name_end(bytes: &[u8], start: usize) -> Option<usize> {
    match lazy_name(bytes, start) {
        Ok(end) => Some(end),
        Err(stop) if stop > start && bytes.get(stop) == Some(&b'/') => {
            lazy_name(bytes, stop + 1).ok()
        }
        Err(_) => None,
    }
}

/// Every mention in stripped text, as in Gitea's `FindAllMentionsBytes`.
///
/// Gitea restarts its search at the end of each found name, so the terminator
/// can double as the next mention's leading whitespace. Names never contain
/// `@`, so judging each `@` on its own gives the same result, in linear time
/// (the name runs scanned after different `@`s are disjoint).
fn scan_mentions(text: &str) -> impl Iterator<Item = &str> + '_ {
    scan_mention_spans(text).filter_map(move |(start, end)| text.get(start..end))
}

/// Byte ranges of the names of [`scan_mentions`] (without the `@`).
fn scan_mention_spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    text.match_indices('@').filter_map(move |(at, _)| {
        let preceded = at == 0
            || bytes
                .get(at - 1)
                .is_some_and(|&c| is_space(c) || c == b'(' || c == b'[');
        if !preceded {
            return None;
        }
        let end = name_end(bytes, at + 1)?;
        Some((at + 1, end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn found(body: &str) -> Vec<String> {
        find_mentions(body)
    }

    #[test]
    fn preceding_character_rules() {
        for body in [
            "@bot", " @bot", "hi @bot", "hi\n@bot", "hi\t@bot", "(@bot)", "[@bot]",
        ] {
            assert_eq!(found(body), ["bot"], "{body:?}");
        }
        for body in [
            "x@bot",
            "=@bot",
            "#@bot",
            "/@bot",
            "bot@example.com",
            "@@bot",
        ] {
            assert!(!mentions(body, "bot"), "{body:?}");
        }
    }

    #[test]
    fn terminator_rules() {
        for body in [
            "@bot", "@bot hi", "@bot\nhi", "@bot: hi", "@bot:", "@bot, hi", "@bot;", "@bot.",
            "@bot. hi", "@bot?", "@bot!", "@bot's", "(@bot)", "[@bot]",
        ] {
            assert_eq!(found(body), ["bot"], "{body:?}");
        }
        for body in [
            "@bot:x",
            "@bot,x",
            "@bot?x",
            "@bot#",
            "@bot=",
            "@bot\"",
            "@bot日本",
            "@bot@x",
        ] {
            assert!(found(body).is_empty(), "{body:?}");
        }
    }

    #[test]
    fn lazy_name_matching() {
        assert_eq!(found("@bot."), ["bot"]);
        assert_eq!(found("@bot.dev"), ["bot.dev"]);
        assert_eq!(found("@bot.dev."), ["bot.dev"]);
        assert_eq!(found("@bot.."), ["bot."]);
        assert_eq!(found("@bot-test"), ["bot-test"]);
        assert_eq!(found("@bot_test"), ["bot_test"]);
        assert_eq!(found("@bot's"), ["bot"]);
        assert_eq!(found("(@bot)"), ["bot"]);
        assert_eq!(found("@bot,"), ["bot"]);
        assert_eq!(found("@bot: please"), ["bot"]);
        assert_eq!(found("@-x"), ["-x"]);
        assert!(found("@.x").is_empty());
        assert!(!mentions("@bot-test", "bot"));
        assert!(!mentions("@bot.dev", "bot"));
    }

    #[test]
    fn team_mentions() {
        assert_eq!(found("@org/team please"), ["org/team"]);
        assert_eq!(found("(@my.org/the-team)"), ["my.org/the-team"]);
        assert!(!mentions("@org/team", "org"));
        assert!(!mentions("@org/team", "team"));
        assert!(found("@org/team/x").is_empty());
        assert!(found("@org/").is_empty());
        assert!(found("@/team").is_empty());
    }

    #[test]
    fn consecutive_mentions_share_whitespace() {
        assert_eq!(found("@a @b"), ["a", "b"]);
        assert_eq!(found("@a\n@b"), ["a", "b"]);
        assert_eq!(found("@a, @b and @c."), ["a", "b", "c"]);
        assert_eq!(found("(@a) (@b)"), ["a", "b"]);
        assert!(found("@a,@b").is_empty());
    }

    #[test]
    fn lowercase_in_order_without_duplicates() {
        assert_eq!(
            found("@Bob @alice @bob @ALICE @carol"),
            ["bob", "alice", "carol"]
        );
        assert!(mentions("@CCBot fix it", "ccbot"));
        assert!(mentions("@ccbot fix it", "CCBOT"));
        assert!(!mentions("@ccbot", ""));
    }

    #[test]
    fn code_is_ignored() {
        for body in [
            "`@ccbot`",
            "``@ccbot``",
            "```\n@ccbot\n```",
            "~~~\n@ccbot\n~~~",
            "```text\r\n@ccbot\r\n```",
            "    @ccbot indented",
            "text\n\n    @ccbot indented",
        ] {
            assert!(!mentions(body, "ccbot"), "{body:?}");
        }
    }

    #[test]
    fn links_images_and_html_are_ignored() {
        for body in [
            "[@ccbot](https://x)",
            "[see @ccbot](https://x)",
            "[x](https://host/(@ccbot))",
            "[@ccbot][ref]\n\n[ref]: https://x",
            "<https://x/@ccbot>",
            "![@ccbot](x.png)",
            "[![@ccbot](x.png)](https://x)",
            "<div>@ccbot</div>",
            "<div>\n@ccbot\n</div>",
            "<!-- @ccbot -->",
            "<a title=\" @ccbot \">x</a>",
            "[ref]: https://x (@ccbot)",
        ] {
            assert!(!mentions(body, "ccbot"), "{body:?}");
        }
    }

    #[test]
    fn text_between_inline_html_tags_counts_like_in_gitea() {
        // `<b>` is inline raw HTML; the text between the tags is an ordinary
        // text node for goldmark, so Gitea mentions (and links) the user.
        assert!(mentions("<b>@ccbot</b>", "ccbot"));
        assert!(mentions("please <span>@ccbot</span>", "ccbot"));
    }

    #[test]
    fn bare_urls_are_ignored() {
        for body in [
            "https://host/wiki/bot#@ccbot-commands",
            "see https://host/a_(@ccbot) now",
            "see HTTPS://host/a_(@ccbot) now",
            "www.x.org/@ccbot",
            "(www.x.org/(@ccbot))",
            "ftp://x/[@ccbot]",
        ] {
            assert!(!mentions(body, "ccbot"), "{body:?}");
        }
        assert!(mentions("see https://host/x @ccbot", "ccbot"));
        assert!(mentions("https://host/x\n@ccbot", "ccbot"));
    }

    #[test]
    fn node_boundaries_act_as_whitespace() {
        for body in [
            "`x`@ccbot",
            "run `x` @ccbot",
            "**@ccbot** please",
            "*hi*@ccbot",
            "~~@ccbot~~",
            "[link](x)@ccbot",
            "a<br>@ccbot",
            "please  \n@ccbot",
            "please\\\n@ccbot",
        ] {
            assert!(mentions(body, "ccbot"), "{body:?}");
        }
    }

    #[test]
    fn escapes_and_entities_stay_raw() {
        assert!(!mentions("\\@ccbot", "ccbot"));
        assert!(!mentions("hi \\@ccbot", "ccbot"));
        assert!(!mentions("**x**\\@ccbot", "ccbot"));
        assert!(!mentions("&#64;ccbot", "ccbot"));
        assert!(!mentions("&Tab;@ccbot", "ccbot"));
        assert!(mentions("\\\\ @ccbot", "ccbot"));
        assert!(mentions("`a\\`@ccbot", "ccbot"));
    }

    #[test]
    fn block_structures_keep_text() {
        for body in [
            "> @ccbot please",
            "- @ccbot please",
            "1. @ccbot please",
            "- [ ] @ccbot please",
            "# @ccbot please",
            "Title @ccbot\n===",
            "| a |\n|---|\n| @ccbot |",
            "text[^1]\n\n[^1]: @ccbot",
        ] {
            assert!(mentions(body, "ccbot"), "{body:?}");
        }
    }

    #[test]
    fn line_endings_and_unicode() {
        assert!(mentions("hi\r\n@ccbot\r\n", "ccbot"));
        assert!(mentions("hi\r@ccbot", "ccbot"));
        assert!(mentions("日本 @ccbot ünïcode", "ccbot"));
        assert!(!mentions("日本@ccbot", "ccbot"));
        assert!(!mentions("\u{a0}@ccbot", "ccbot"));
        assert!(!mentions("@ccbot\u{a0}", "ccbot"));
        assert!(!mentions("\u{b}@ccbot", "ccbot"));
    }

    #[test]
    fn real_gitea_bodies() {
        let body = "@ccbot can you look into why `TestRetryBackoff` flakes on CI?\r\n\r\nThe last failing run is https://git.example.com/acme/widgets/actions/runs/881 - I suspect the 3 vs 4 attempts race in `src/retry.rs`.";
        assert!(mentions(body, "ccbot"));

        let body = "Looks good overall. @ccbot please run the full test-suite on this branch and summarise any failures, especially `retry::tests::*`.\r\n\r\nThanks!";
        assert!(mentions(body, "ccbot"));

        let body = "Thanks @carol, I'll review tomorrow. FYI the ccbot account's address is ccbot@example.com and its docs live at https://git.example.com/acme/widgets/wiki/ccbot#@ccbot-commands";
        assert!(!mentions(body, "ccbot"));
        assert!(mentions(body, "carol"));
        assert_eq!(found(body), ["carol"]);

        let body = "> @ccbot can you look into why ...\n\n@bob I reproduced it";
        assert_eq!(found(body), ["ccbot", "bob"]);

        assert!(mentions("@CCBot fix it", "ccbot"));
        for body in [
            "```\n@ccbot\n```",
            "    @ccbot indented",
            "`@ccbot`",
            "[@ccbot](https://x)",
        ] {
            assert!(!mentions(body, "ccbot"), "{body:?}");
        }
    }

    #[test]
    fn large_pathological_bodies_finish() {
        let mib = 1 << 20;
        let bodies = [
            "@".repeat(mib),
            " @a".repeat(mib / 3),
            "@a-".repeat(mib / 3),
            "@a.".repeat(mib / 3),
            "@a/".repeat(mib / 3),
            "a".repeat(mib),
            "[".repeat(mib),
            "(".repeat(mib),
            "`".repeat(mib),
            "*@a".repeat(mib / 3),
            "https://".repeat(mib / 8),
            "\\".repeat(mib),
            "> ".repeat(mib / 2),
        ];
        for body in &bodies {
            let _ = find_mentions(body);
        }
        assert_eq!(find_mentions(&" @a".repeat(1000)), ["a"]);
    }

    /// A login in Gitea's generated style; `_` next to punctuation could form
    /// Markdown emphasis (`@_a_`), which hides the mention in Gitea as well.
    fn plain_login(login: &str) -> bool {
        let b = login.as_bytes();
        b.iter().enumerate().all(|(i, &c)| {
            c != b'_'
                || (i > 0
                    && b[i - 1].is_ascii_alphanumeric()
                    && b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric))
        })
    }

    proptest! {
        #[test]
        fn never_panics(body in ".*") {
            let _ = find_mentions(&body);
            let _ = mentions(&body, "bot");
        }

        #[test]
        fn never_panics_markdownish(body in "[ \t\r\n@a-cé日`*_~()\\[\\]<>!#:./\\\\&;|=-]{0,300}") {
            let _ = find_mentions(&body);
            let _ = mentions(&body, "a");
        }

        #[test]
        fn text_after_the_mention_exists_exactly_when_mentioned(
            body in "[ \t\r\na-dA-D@`*_()\\[\\]<>!#:./\\\\&;=-]{0,200}|.{0,200}",
            login in "[a-dA-D]{0,3}",
        ) {
            // The webhook decides "mentioned" from this text being there.
            prop_assert_eq!(after_first_mention(&body, &login).is_some(), mentions(&body, &login));
        }

        #[test]
        fn case_of_body_does_not_matter(
            body in "[ \t\r\na-dA-D@`*_()\\[\\]<>!#:./\\\\&;=-]{0,200}|.{0,200}",
            login in "[a-dA-D]{1,3}",
        ) {
            let expected = mentions(&body, &login);
            prop_assert_eq!(mentions(&body.to_ascii_uppercase(), &login), expected);
            prop_assert_eq!(mentions(&body.to_ascii_lowercase(), &login), expected);
        }

        #[test]
        fn generated_mentions_are_found(
            lead in "([a-z]{1,8})?",
            sep in prop::sample::select(vec!["", " ", "\n", "\r\n", "\t", "(", "["]),
            login in "[a-z0-9_][a-z0-9_-]{0,15}".prop_filter("`_` may form emphasis", |l| plain_login(l)),
            term in prop::sample::select(vec![
                "", " ", "\n", "\r\n", "\t", ":", ",", ";", ".", "?", "!", "'", ")", "]",
            ]),
            suffix in "[a-z ]{0,10}",
        ) {
            // Only the start of the body may stand in for whitespace, and a
            // tab at the very start would be an indented code block.
            let sep = if lead.is_empty() && matches!(sep, "\n" | "\r\n" | "\t") { " " } else { sep };
            let sep = if !lead.is_empty() && sep.is_empty() { " " } else { sep };
            // `[:,;.?!]` only terminate when followed by whitespace or the end.
            // An empty terminator means "end of body".
            let suffix = if term.is_empty() {
                String::new()
            } else if matches!(term, ":" | "," | ";" | "." | "?" | "!") && !suffix.is_empty() {
                format!(" {suffix}")
            } else {
                suffix
            };
            let body = format!("{lead}{sep}@{login}{term}{suffix}");
            prop_assert!(mentions(&body, &login), "{:?}", body);
            prop_assert!(mentions(&body, &login.to_ascii_uppercase()), "{:?}", body);
            prop_assert!(find_mentions(&body).contains(&login), "{:?}", body);
        }

        #[test]
        fn login_glued_to_alphanumeric_is_not_found(
            lead in "[a-zA-Z ]{0,8}[a-zA-Z0-9]",
            login in "[a-z0-9_][a-z0-9_-]{0,15}",
            suffix in "( [a-z ]{0,10})?",
        ) {
            let body = format!("{lead}@{login}{suffix}");
            prop_assert!(!mentions(&body, &login), "{:?}", body);
            prop_assert!(!find_mentions(&body).contains(&login), "{:?}", body);
        }
    }
}
