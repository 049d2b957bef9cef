//! What each fuzz target checks, shared by the targets (`fuzz_targets/`)
//! and the replay of their seeds and found crashes in the test suite
//! (`tests/it/fuzzing.rs`). Every function takes what the fuzzer made and
//! panics when a rule is broken.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use codex_bridge::codex::rpc::{decode, Decoded};
use codex_bridge::webhook::command::{parse, read};
use codex_bridge::webhook::delivery::{self, MAX_DELIVERY_ID};
use codex_bridge::webhook::event::Normalizer;
use codex_bridge::webhook::mention::{after_first_mention, find_mentions, mentions};
use codex_bridge::webhook::verify;

/// A delivery as the webhook reads it: header lines (`name: value`), an
/// empty line, then the body. Whatever the bytes, reading the headers, the
/// signed payload, the signature and the payload ends in a value or an
/// error, never a panic; what is read keeps the rules the handler relies on.
/// Whether the delivery was read to the end (normalised).
pub fn webhook(data: &[u8]) -> bool {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let mut headers = HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let Ok(signed) = delivery::signed_payload(delivery::content_type(&headers), body) else {
        return false;
    };
    // No signature the fuzzer writes is valid; its parsing still runs.
    assert!(verify::verify(b"fuzz-secret", &signed, &headers).is_err());
    let Ok(read) = delivery::delivery_headers(&headers) else {
        return false;
    };
    let id = &read.delivery_id;
    assert!(!id.is_empty() && id.len() <= MAX_DELIVERY_ID);
    assert!(id.chars().all(|c| c.is_ascii_graphic()));
    let normalizer = Normalizer {
        instance_id: "default".to_owned(),
        bot_login: "ccbot".to_owned(),
        ignore_logins: ["renovate".to_owned()].into(),
    };
    match normalizer.normalize(&read, &signed) {
        Ok(request) => {
            // Only a UTF-8 body is ever stored.
            assert!(std::str::from_utf8(&signed).is_ok());
            assert_eq!(request.delivery_id, *id);
            true
        }
        Err(_) => false,
    }
}

/// Gitea's mention rules over any comment body: the three questions the
/// bridge asks (who is mentioned, is the bot, what follows its mention)
/// always agree with one another.
pub fn mention(body: &str) {
    let found = find_mentions(body);
    for name in &found {
        assert_eq!(*name, name.to_ascii_lowercase());
    }
    let mut unique = found.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), found.len(), "{found:?}");
    for login in ["ccbot", "CCBot", "a.b-c", "bob"] {
        let mentioned = mentions(body, login);
        assert_eq!(
            mentioned,
            found.contains(&login.to_ascii_lowercase()),
            "{login} in {body:?}"
        );
        assert_eq!(after_first_mention(body, login).is_some(), mentioned);
    }
    assert!(!mentions(body, ""));
}

/// The comment grammar (`@bot /word argument`) over any comment body: a
/// command is read only from a comment that mentions the bot, its word is
/// a command word, and reading it twice reads the same.
pub fn command(body: &str) {
    let Some(line) = parse(body, "ccbot") else {
        return;
    };
    assert!(mentions(body, "ccbot"));
    let word = &line.word;
    assert!(!word.is_empty() && word.len() <= 32, "{word:?}");
    assert!(
        word.starts_with(|c: char| c.is_ascii_lowercase()),
        "{word:?}"
    );
    assert!(word
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    assert_eq!(line.argument, line.argument.trim());
    let after = after_first_mention(body, "ccbot").expect("mentioned");
    assert_eq!(read(&after), Some(line));
}

/// The app-server's stdout, one line at a time: every line decodes to one
/// case, never a panic, and an answer's id is one the bridge could have sent.
pub fn jsonrpc(line: &str) {
    match decode(line) {
        Decoded::Request { method, .. } | Decoded::Notification { method, .. } => {
            // A method name came from the line itself.
            assert!(line.len() >= method.len());
        }
        Decoded::Answer { .. }
        | Decoded::ForeignAnswer
        | Decoded::NotJsonRpc
        | Decoded::Shapeless => {}
    }
}
