//! The command line: `serve`, `migrate`, `tasks list|show`, `approvals`,
//! `reconcile`, `gitea hook` ([`hook`]), `codex login|status|logout`
//! ([`codex`]), `doctor` ([`doctor`]) and `audit export` ([`audit`]).

pub mod audit;
pub mod codex;
pub mod doctor;
pub mod hook;

use crate::config::{Config, DatabaseUrl};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;
use crate::store::tasks::{self, TaskFilter, Verdict};
use crate::store::{self, ConnSettings, DbConn, StoreError};
use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "codex-bridge", version, about = "Turns Gitea comments into Codex work.", long_about = None)]
pub struct Cli {
    /// TOML configuration file; every key can also be set as CODEX_BRIDGE_<KEY>.
    #[arg(long, global = true, env = "CODEX_BRIDGE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (applies pending migrations first).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Inspect tasks.
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// List or decide the approvals the agent asked for.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Settle a task in `needs_reconciliation` by an explicit decision about one attempt.
    /// Never re-runs anything; it records the verdict and an audit event. On a
    /// remote worker's machine, with --server and --token-file (and the
    /// worker's config, for journal_url): the attempt its journal holds as
    /// uncertain, on the server and in the journal at once.
    Reconcile(ReconcileArgs),
    /// Sign the running server's Codex in or out, or show its account.
    Codex {
        #[command(subcommand)]
        command: codex::CodexCommand,
    },
    /// Check the configuration, the store, Gitea, Codex, the Gitea MCP server and
    /// the workspace: one line per check (ok, warn or fail, with what to do).
    /// Exits 0 only when nothing failed. Never prints a secret.
    Doctor(doctor::DoctorArgs),
    /// Write the audit log out for an archive (the store never deletes it).
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Run a remote worker: lease the repositories an operator gave this
    /// worker on the server, and run their turns on this machine's Codex, in
    /// its own workspaces (config keys codex_bin, codex_home,
    /// workspace_root, gitea_url, gitea_token to clone, gitea_mcp_* and
    /// gitea_mcp_token for the agent's comments, journal_url).
    Worker(WorkerArgs),
    /// Set Gitea up for the bridge.
    Gitea {
        #[command(subcommand)]
        command: GiteaCommand,
    },
}

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The server's base URL, e.g. https://bridge.example.com.
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// A file holding the worker's token (shown once when an operator
    /// registered the worker). Read, never logged.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// Before starting: mark the turns this worker's journal holds as
    /// uncertain settled, once their tasks were reconciled on the server.
    /// Runs nothing again.
    #[arg(long, requires = "confirm_no_active_turn")]
    pub settle_uncertain: bool,
    /// Confirms that no Codex turn of this worker still runs (its processes,
    /// threads and files were checked).
    #[arg(long)]
    pub confirm_no_active_turn: bool,
}

/// `codex-bridge worker`: runs until the worker is revoked or stopped.
pub fn worker(config: Config, args: WorkerArgs) -> anyhow::Result<()> {
    let token = crate::worker::read_token(&args.token_file)?;
    if args.settle_uncertain {
        let n = crate::worker::settle_uncertain(&config)?;
        println!("settled {n} uncertain turn(s) in the worker's journal");
    }
    actix_web::rt::System::new().block_on(crate::worker::run(config, args.server, token))
}

#[derive(Debug, Subcommand)]
pub enum GiteaCommand {
    /// Create each repository's webhook to the bridge, or bring it up to date.
    ///
    /// The hook: type gitea, JSON, signed with webhook_secret, the comment and
    /// review events, active. A hook already pointing at URL is kept, updated
    /// or replaced; duplicates are removed. One line per repository; exits
    /// non-zero if any failed. Needs gitea_url, gitea_token (a repository
    /// admin's) and webhook_secret.
    Hook(hook::HookArgs),
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List tasks, newest first.
    List {
        /// Only tasks in this state (e.g. queued, needs_reconciliation).
        #[arg(long)]
        state: Option<String>,
        /// Only tasks of this repository (e.g. default:acme/widgets).
        #[arg(long)]
        repo: Option<String>,
        /// Only tasks of this Issue/PR (e.g. default:acme/widgets:issue:17).
        #[arg(long)]
        resource: Option<String>,
        /// Tasks per page (1 to 500). When more match, the next page's
        /// cursor is printed on stderr.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=tasks::MAX_PAGE))]
        limit: i64,
        /// Start after this cursor (printed with the page before).
        #[arg(long)]
        cursor: Option<i64>,
        /// Every matching task, page after page.
        #[arg(long, conflicts_with = "cursor")]
        all: bool,
        /// Print JSON (one array of all the tasks printed) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one task: its record, transitions, attempts and audit events (JSON).
    Show { task_id: TaskId },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Pending approvals, oldest first (JSON).
    List,
    /// Accept or decline one pending approval (once; the turn then goes on).
    Decide {
        approval_id: String,
        decision: DecisionArg,
        /// Why, for the audit log.
        #[arg(long, default_value = "decided from the command line")]
        reason: String,
        /// Who is deciding (audited as admin:<operator>).
        #[arg(long, env = "USER", default_value = "cli")]
        operator: String,
        /// Idempotency key (a repeat returns the first result); generated if omitted.
        #[arg(long)]
        request_id: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DecisionArg {
    Accept,
    Decline,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum VerdictArg {
    Failed,
    Succeeded,
}

#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    pub task_id: TaskId,
    /// The uncertain attempt (see `codex-bridge tasks show TASK_ID`).
    pub attempt_id: String,
    pub verdict: VerdictArg,
    /// Required: you checked that no Codex turn of this attempt is still running
    /// (processes, the thread's timeline, the workspace).
    #[arg(long)]
    pub confirm_no_active_turn: bool,
    /// Why, for the audit log.
    #[arg(long, default_value = "reconciled from the command line")]
    pub reason: String,
    /// Who is deciding (audited as admin:<operator>).
    #[arg(long, env = "USER", default_value = "cli")]
    pub operator: String,
    /// On a worker: the server's base URL (as `codex-bridge worker --server`).
    /// The server is told through the worker API; the worker's journal
    /// (journal_url) is settled too.
    #[arg(long, value_name = "URL", requires = "token_file")]
    pub server: Option<String>,
    /// On a worker: the worker's token file (as `codex-bridge worker
    /// --token-file`).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
}

/// Opens a direct connection for a one-off command, refusing a database whose
/// schema is behind this binary.
pub(crate) fn connect(config: &Config) -> anyhow::Result<DbConn> {
    if let DatabaseUrl::Sqlite(path) = &config.database_url {
        if !path.exists() {
            bail!(
                "the database {} does not exist: run `codex-bridge migrate` (or start the server) first, \
                 or point database_url at the server's database",
                path.display()
            );
        }
    }
    let mut conn = DbConn::establish(&ConnSettings::from_config(config))
        .with_context(|| format!("cannot open {}", config.database_url.redacted()))?;
    let pending = match &mut conn {
        DbConn::Sqlite(c) => diesel_migrations::MigrationHarness::has_pending_migration(
            &mut **c,
            store::SQLITE_MIGRATIONS,
        ),
        DbConn::Pg(c) => diesel_migrations::MigrationHarness::has_pending_migration(
            c,
            store::POSTGRES_MIGRATIONS,
        ),
    }
    .map_err(|e| anyhow::anyhow!("cannot read the migration state: {e}"))?;
    if pending {
        bail!("the database schema is not up to date: run `codex-bridge migrate` (or start the server) first");
    }
    Ok(conn)
}

pub fn migrate(config: &Config) -> anyhow::Result<()> {
    if let DatabaseUrl::Sqlite(path) = &config.database_url {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
    }
    let mut conn = DbConn::establish(&ConnSettings::from_config(config))
        .with_context(|| format!("cannot open {}", config.database_url.redacted()))?;
    let applied = store::run_migrations(&mut conn)?;
    if applied.is_empty() {
        println!("database {} is up to date", config.database_url.redacted());
    } else {
        for v in applied {
            println!("applied migration {v}");
        }
    }
    Ok(())
}

pub fn tasks_command(config: &Config, command: TasksCommand) -> anyhow::Result<()> {
    let mut conn = connect(config)?;
    match command {
        TasksCommand::List {
            state,
            repo,
            resource,
            limit,
            cursor,
            all,
            json,
        } => {
            let state = match state {
                Some(s) => Some(s.parse::<TaskState>()?),
                None => None,
            };
            let mut filter = TaskFilter {
                repo_key: repo,
                resource_key: resource,
                state,
                cursor,
                limit,
            };
            let mut rows = Vec::new();
            let next = loop {
                let (page, next) = tasks::list(&mut conn, &filter)?;
                rows.extend(page);
                match next {
                    Some(n) if all => filter.cursor = Some(n),
                    other => break other,
                }
            };
            if let Some(next) = next {
                eprintln!("more tasks match: add --cursor {next} for the next page, or --all");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<38} {:<22} {:>4} {:<44} CREATED",
                    "TASK", "STATE", "VER", "RESOURCE"
                );
                for t in rows {
                    println!(
                        "{:<38} {:<22} {:>4} {:<44} {}",
                        t.task_id, t.state, t.state_version, t.resource_key, t.created_at
                    );
                }
            }
        }
        TasksCommand::Show { task_id } => {
            let detail = tasks::detail(&mut conn, &task_id)?
                .with_context(|| format!("no task {task_id}"))?;

            println!("{}", serde_json::to_string_pretty(&detail)?);
        }
    }
    Ok(())
}

pub fn reconcile(config: &Config, args: ReconcileArgs) -> anyhow::Result<()> {
    if !args.confirm_no_active_turn {
        bail!(
            "refusing to reconcile without --confirm-no-active-turn: first check that no Codex turn of attempt {} \
             is still running (processes, the thread's timeline, the workspace). Reconciliation never re-runs anything.",
            args.attempt_id
        );
    }
    if let (Some(server), Some(token_file)) = (&args.server, &args.token_file) {
        return reconcile_on_worker(config, server, token_file, &args);
    }
    let verdict = match args.verdict {
        VerdictArg::Failed => Verdict::Failed,
        VerdictArg::Succeeded => Verdict::Succeeded,
    };
    let mut conn = connect(config)?;
    let actor = format!("admin:{}", args.operator);
    let event = conn
        .write_transaction(|c| {
            store::control::reconcile(
                c,
                &args.task_id,
                &args.attempt_id,
                verdict,
                &actor,
                &args.reason,
            )
        })
        .map_err(|e: StoreError| anyhow::anyhow!("{e}"))?;
    println!("{}", serde_json::to_string_pretty(&event)?);
    Ok(())
}

/// `reconcile` on a worker's machine: through the worker API, then the
/// worker's journal.
fn reconcile_on_worker(
    config: &Config,
    server: &str,
    token_file: &std::path::Path,
    args: &ReconcileArgs,
) -> anyhow::Result<()> {
    let token = crate::worker::read_token(token_file)?;
    let settle = crate::worker::reconcile::Settle {
        task_id: args.task_id.to_string(),
        attempt_id: args.attempt_id.clone(),
        verdict: match args.verdict {
            VerdictArg::Failed => "failed",
            VerdictArg::Succeeded => "succeeded",
        }
        .to_owned(),
        operator: args.operator.clone(),
        reason: args.reason.clone(),
    };
    let done = crate::worker::reconcile::reconcile(&config.journal_path, server, token, &settle)?;
    match &done.event {
        Some(event) => println!("{}", serde_json::to_string_pretty(event)?),
        None => println!(
            "the server had already reconciled attempt {} of task {}",
            args.attempt_id, args.task_id
        ),
    }
    println!(
        "settled {} uncertain turn(s) of attempt {} in the worker's journal",
        done.turns, args.attempt_id
    );
    Ok(())
}

pub fn approvals_command(config: &Config, command: ApprovalsCommand) -> anyhow::Result<()> {
    let mut conn = connect(config)?;
    match command {
        ApprovalsCommand::List => {
            let list = store::approvals::pending(&mut conn)?;
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        ApprovalsCommand::Decide {
            approval_id,
            decision,
            reason,
            operator,
            request_id,
        } => {
            let req = store::control::ControlRequest {
                request_id: request_id
                    .unwrap_or_else(|| format!("cli-{}", uuid::Uuid::now_v7().simple())),
                reason,
                actor: format!("admin:{operator}"),
            };
            let accept = matches!(decision, DecisionArg::Accept);
            let event = conn
                .write_transaction(|c| store::approvals::decide(c, &req, &approval_id, accept))
                .map_err(|e: StoreError| anyhow::anyhow!("{e}"))?;
            println!("{}", serde_json::to_string_pretty(&event)?);
        }
    }
    Ok(())
}
