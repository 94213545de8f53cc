//! courier-store: The only crate that speaks SQL: migrations, queries, the managed local PostgreSQL cluster.
