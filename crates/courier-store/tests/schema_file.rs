//! `crates/courier-store/schema.sql` is the schema after every migration:
//! this test applies the migrations to a fresh database, writes its schema
//! out from the catalogs in one normalized form (tables with their columns,
//! constraints and storage settings, indexes, sequences, views, functions,
//! triggers and comments, each kind in name order), and compares. Built from
//! the catalogs rather than by `pg_dump`, so the file depends on no client
//! binary's version and carries no ownership, privileges or session
//! settings: only what the migrations made.
//!
//! After a new migration, regenerate the file with the command the failure
//! names ([`REGENERATE`]) and read its diff: it is the migration's effect.

use courier_testkit::fresh_db;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The one command that writes the file again.
const REGENERATE: &str =
    "COURIER_SCHEMA_WRITE=1 cargo nextest run -p courier-store --test schema_file";

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema.sql")
}

/// Rows of one text column.
async fn texts(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The schema of the database `c` is connected to, in the file's form.
async fn schema_of(c: &tokio_postgres::Client) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "-- The courier schema after every migration (crates/courier-store/migrations),\n\
         -- written from the catalogs by crates/courier-store/tests/schema_file.rs, which\n\
         -- checks it. Do not edit: regenerate with\n\
         --   {REGENERATE}\n\
         -- Each kind of object in name order: tables (columns, constraints, storage\n\
         -- settings), sequences, indexes, views, functions, triggers, comments."
    )
    .unwrap();

    section(&mut out, "Tables");
    for t in texts(
        c,
        "SELECT relname FROM pg_class
         WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
         ORDER BY relname",
    )
    .await
    {
        out.push_str(&table(c, &t).await);
    }

    section(&mut out, "Sequences");
    for s in texts(
        c,
        "SELECT format('CREATE SEQUENCE %I AS %s START %s INCREMENT %s%s;',
                       s.sequencename, s.data_type, s.start_value, s.increment_by,
                       coalesce(' OWNED BY ' || (
                           SELECT format('%I.%I', t.relname, a.attname)
                           FROM pg_depend d
                           JOIN pg_class t ON t.oid = d.refobjid
                           JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                           WHERE d.objid = format('%I', s.sequencename)::regclass
                             AND d.deptype = 'a' AND d.classid = 'pg_class'::regclass), ''))
         FROM pg_sequences s WHERE s.schemaname = 'public'
         ORDER BY s.sequencename",
    )
    .await
    {
        writeln!(out, "{s}").unwrap();
    }

    section(
        &mut out,
        "Indexes (those of constraints are with their tables)",
    );
    for i in texts(
        c,
        "SELECT pg_get_indexdef(i.indexrelid) || ';'
         FROM pg_index i
         JOIN pg_class ic ON ic.oid = i.indexrelid
         JOIN pg_class tc ON tc.oid = i.indrelid
         WHERE ic.relnamespace = 'public'::regnamespace
           AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
         ORDER BY tc.relname, ic.relname",
    )
    .await
    {
        writeln!(out, "{i}").unwrap();
    }

    section(&mut out, "Views");
    for v in texts(
        c,
        "SELECT format(E'CREATE VIEW %I AS\\n%s', relname, pg_get_viewdef(oid, true))
         FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'v'
         ORDER BY relname",
    )
    .await
    {
        writeln!(out, "{v}\n").unwrap();
    }

    section(&mut out, "Schemas");
    for n in texts(
        c,
        "SELECT format('CREATE SCHEMA %I;', nspname) FROM pg_namespace
         WHERE nspname NOT IN ('public', 'information_schema') AND nspname !~ '^pg_'
         ORDER BY 1",
    )
    .await
    {
        writeln!(out, "{n}").unwrap();
    }

    section(&mut out, "Functions");
    for f in texts(
        c,
        "SELECT pg_get_functiondef(p.oid)
         FROM pg_proc p
         WHERE p.pronamespace::regnamespace::text IN ('public', 'courier') AND p.prokind = 'f'
         ORDER BY p.pronamespace::regnamespace::text DESC, p.proname,
                  pg_get_function_identity_arguments(p.oid)",
    )
    .await
    {
        writeln!(out, "{};\n", f.trim_end()).unwrap();
    }

    section(&mut out, "Triggers");
    for t in texts(
        c,
        "SELECT pg_get_triggerdef(g.oid, true) || ';'
         FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid
         WHERE t.relnamespace = 'public'::regnamespace AND NOT g.tgisinternal
         ORDER BY t.relname, g.tgname",
    )
    .await
    {
        writeln!(out, "{t}").unwrap();
    }

    section(&mut out, "Comments");
    for d in texts(
        c,
        "SELECT CASE WHEN d.objsubid = 0
                     THEN format('COMMENT ON %s %s IS %L;',
                                 CASE d.classoid WHEN 'pg_proc'::regclass THEN 'FUNCTION' ELSE 'TABLE' END,
                                 CASE d.classoid WHEN 'pg_proc'::regclass THEN d.objoid::regprocedure::text
                                                 ELSE d.objoid::regclass::text END,
                                 d.description)
                     ELSE format('COMMENT ON COLUMN %s.%I IS %L;', d.objoid::regclass,
                                 a.attname, d.description) END
         FROM pg_description d
         LEFT JOIN pg_attribute a ON a.attrelid = d.objoid AND a.attnum = d.objsubid
         WHERE (d.classoid = 'pg_class'::regclass
                AND d.objoid IN (SELECT oid FROM pg_class
                                 WHERE relnamespace = 'public'::regnamespace))
            OR (d.classoid = 'pg_proc'::regclass
                AND d.objoid IN (SELECT oid FROM pg_proc
                                 WHERE pronamespace::regnamespace::text IN ('public', 'courier')))
         ORDER BY 1",
    )
    .await
    {
        writeln!(out, "{d}").unwrap();
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// Starts a section after exactly one blank line.
fn section(out: &mut String, title: &str) {
    while out.ends_with('\n') {
        out.pop();
    }
    write!(out, "\n\n-- {title}\n").unwrap();
}

/// One table: its columns in order, its constraints in name order, its
/// storage settings.
async fn table(c: &tokio_postgres::Client, name: &str) -> String {
    let rows = c
        .query(
            "SELECT format('    %I %s%s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                           CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
                                              WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY'
                                              ELSE '' END,
                           CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                           coalesce(CASE WHEN a.attgenerated = 's'
                                         THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ') STORED'
                                         ELSE ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) END, ''))
             FROM pg_attribute a
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = format('%I', $1::text)::regclass
               AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            &[&name],
        )
        .await
        .unwrap();
    let mut lines: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let constraints = c
        .query(
            "SELECT format('    CONSTRAINT %I %s', conname, pg_get_constraintdef(oid))
             FROM pg_constraint
             WHERE conrelid = format('%I', $1::text)::regclass
             ORDER BY conname",
            &[&name],
        )
        .await
        .unwrap();
    lines.extend(constraints.iter().map(|r| r.get::<_, String>(0)));
    let options: Option<String> = c
        .query_one(
            "SELECT array_to_string(reloptions, ', ') FROM pg_class
             WHERE oid = format('%I', $1::text)::regclass",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    let with = options.map_or(String::new(), |o| format!(" WITH ({o})"));
    format!("CREATE TABLE {name} (\n{}\n){with};\n\n", lines.join(",\n"))
}

#[tokio::test]
async fn schema_sql_is_the_schema_after_every_migration() {
    let db = fresh_db().await;
    let c = db.raw_client().await;
    let now = schema_of(&c).await;
    let path = schema_path();
    if std::env::var_os("COURIER_SCHEMA_WRITE").is_some() {
        std::fs::write(&path, &now).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("wrote {}", path.display());
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    if written != now {
        let first = written
            .lines()
            .zip(now.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| written.lines().count().min(now.lines().count()));
        panic!(
            "{} is not the schema the migrations make (first difference at line {}:\n  file:       {:?}\n  migrations: {:?})\nRegenerate it with:\n  {REGENERATE}",
            path.display(),
            first + 1,
            written.lines().nth(first).unwrap_or("<end of file>"),
            now.lines().nth(first).unwrap_or("<end of schema>"),
        );
    }
}
