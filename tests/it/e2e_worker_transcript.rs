//! A turn on a remote worker leaves the transcript and token counts a turn
//! of the server's own Codex leaves: its items (the command with its exit
//! code and output, scrubbed on the server; the file change and its diff;
//! the reply's MCP tool call; the final message) and the thread's token
//! totals cross the wire with the turn's other events, and the server
//! records them as it records a local turn's (`tests/it/transcripts.rs`).

use crate::e2e::Loop;
use crate::transcripts::{a_turn_that_does_everything, the_transcript_of_everything};
use crate::workerproc::{WorkerEnv, WorkerProc};

#[test]
fn e2e_worker_a_turn_on_a_worker_leaves_the_transcript_and_tokens_a_local_turn_leaves() {
    let l = Loop::start_with(|b| {
        b.codex_model("gpt-5.5")
            .env("CODEX_BRIDGE_AGENT_RUNTIME", "remote")
    });
    // The worker runs Codex on the app's home: model `gpt-5.5` and the
    // fake model behind it.
    let worker = WorkerProc::start(&l.app, "build-1", &["acme/widgets"], WorkerEnv::of(&l.app));
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let task = a_turn_that_does_everything(&l);
        assert_eq!(
            l.detail(&task)["attempts"][0]["owner"],
            format!("worker:{}", worker.id).as_str(),
            "the worker ran the turn"
        );
        the_transcript_of_everything(&l, &task);
    }));
    if let Err(panic) = checked {
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
}
