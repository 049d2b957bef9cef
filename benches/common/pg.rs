//! A throwaway PostgreSQL database for the benchmarks that measure the
//! server on PostgreSQL (`scripts/with-postgres` provides the cluster).

use anyhow::{Context, Result};
use diesel::{Connection, RunQueryDsl};

/// A throwaway database in the PostgreSQL of `TEST_DATABASE_URL`, dropped on drop.
pub struct PgDatabase {
    admin_url: String,
    name: String,
    pub url: String,
}

impl PgDatabase {
    pub fn create(admin_url: &str) -> Result<PgDatabase> {
        let name = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let mut conn = diesel::PgConnection::establish(admin_url)
            .context("connecting to TEST_DATABASE_URL to create the benchmark database")?;
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .with_context(|| format!("CREATE DATABASE {name}"))?;
        Ok(PgDatabase {
            url: with_database(admin_url, &name),
            admin_url: admin_url.to_owned(),
            name,
        })
    }
}

impl PgDatabase {
    /// Local pids of the backends connected to this database (none if PostgreSQL runs
    /// elsewhere: then a pid here would be somebody else's process).
    pub fn backend_pids(&self) -> Vec<u32> {
        let rows = diesel::PgConnection::establish(&self.admin_url)
            .map_err(anyhow::Error::from)
            .and_then(|mut c| {
                diesel::sql_query(format!(
                    "SELECT pid FROM pg_stat_activity WHERE datname = '{}'",
                    self.name
                ))
                .load::<Backend>(&mut c)
                .map_err(anyhow::Error::from)
            });
        match rows {
            Ok(rows) => rows
                .into_iter()
                .filter_map(|r| u32::try_from(r.pid).ok())
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|comm| comm.trim() == "postgres")
                })
                .collect(),
            Err(e) => {
                eprintln!("warning: cannot list the PostgreSQL backends: {e:#}");
                Vec::new()
            }
        }
    }
}

#[derive(diesel::QueryableByName)]
struct Backend {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let result = diesel::PgConnection::establish(&self.admin_url)
            .map_err(anyhow::Error::from)
            .and_then(|mut c| {
                // FORCE: a killed server's sessions may not be gone yet.
                diesel::sql_query(format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .execute(&mut c)
                .map_err(anyhow::Error::from)
            });
        if let Err(e) = result {
            eprintln!(
                "warning: could not drop the benchmark database {}: {e:#}",
                self.name
            );
        }
    }
}

/// `postgres://user@host:port/db?opts` with another database name.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let root = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}
