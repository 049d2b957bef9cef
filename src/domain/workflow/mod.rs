//! Workflows as the agent and the store see them: a workflow's states, the
//! kinds of owner gate, and the bridge's tools for the agent — their names,
//! what the model is told of each, and the one reading of a call's
//! arguments (a bad call is an error the model can read, never a crash).

use super::states::text_enum;

pub mod children;
pub mod decide;
pub mod results;
mod tools;

pub use tools::{Delegation, ResultReport, ToolCall, ToolCallError, ToolSpec, TOOLS};

/// The namespace the tools are offered under: the model sees
/// `codex_bridge` tools named as below.
pub const TOOL_NAMESPACE: &str = "codex_bridge";

/// What a continuation's turn is told (the prompt adds the thread's news).
pub const CONTINUATION_TEXT: &str = "The workflow of this Issue or pull request is still open. \
Continue the work the owner asked for in this thread, from where the last turn stopped. When the \
whole mission is done and checked, call the codex_bridge tool complete_workflow with a summary; \
until then the bridge continues the work after each turn.";

/// Longest text a tool argument may carry (a summary, a question): a
/// comment in Gitea holds more, but an answer longer than this is not a
/// summary.
pub const MAX_TOOL_TEXT: usize = 16 * 1024;

text_enum!(
    /// Where a workflow is. Open ones take their session's next logical
    /// input; the last three are ends.
    WorkflowState, "workflow state" {
        /// Work goes on: a continuation follows an ordinary final.
        Open = "open",
        /// An owner must answer (a gate, `/stop`, a budget hit).
        WaitingOwner = "waiting_owner",
        /// It waits for a child it handed work to.
        WaitingChild = "waiting_child",
        /// The agent said the mission is done.
        Completed = "completed",
        Cancelled = "cancelled",
        Failed = "failed",
    }
);

impl WorkflowState {
    pub fn is_end(self) -> bool {
        matches!(
            self,
            WorkflowState::Completed | WorkflowState::Cancelled | WorkflowState::Failed
        )
    }
}

text_enum!(
    /// Why a workflow waits for its owner. The first four are the authority
    /// a mission may not have granted, and the only ones the agent may ask
    /// for; the bridge opens the others.
    GateKind, "gate kind" {
        /// Publish to a public remote or registry.
        Publish = "publish",
        /// Expose a new network service.
        NetworkService = "network_service",
        /// Pay for a resource.
        SpendMoney = "spend_money",
        /// Choose between materially different product semantics.
        ProductSemantics = "product_semantics",
        /// Too many finals in a row without durable progress.
        IdleFinals = "idle_finals",
        /// The owner stopped the running turn.
        Stopped = "stopped",
        /// A limit on what the agent may spend was reached.
        Budget = "budget",
    }
);

impl GateKind {
    /// Whether the agent may open a gate of this kind.
    pub fn agent_may_ask(self) -> bool {
        matches!(
            self,
            GateKind::Publish
                | GateKind::NetworkService
                | GateKind::SpendMoney
                | GateKind::ProductSemantics
        )
    }
}
