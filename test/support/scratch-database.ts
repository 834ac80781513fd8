/**
 * A database of its own on a PostgreSQL server, for one test run, benchmark or tool run that starts a
 * service on it: made empty (the service's migrations make the schema), and dropped at the end.
 */
import crypto from "node:crypto";
import pg from "pg";

export interface ScratchDatabase {
  name: string;
  url: string;
  /** Removes it, with FORCE: a service the run started may still hold connections (a run that failed). */
  drop(): Promise<void>;
}

/** One statement on the server of `baseUrl`, from its own connection (CREATE/DROP DATABASE run outside a transaction). */
async function onServer(baseUrl: string, statement: string): Promise<void> {
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

/** A fresh database named `prefix` and random hex, on the server of `baseUrl`. */
export async function createScratchDatabase(baseUrl: string, prefix: string): Promise<ScratchDatabase> {
  const name = `${prefix}_${crypto.randomBytes(6).toString("hex")}`;
  await onServer(baseUrl, `CREATE DATABASE ${name}`);
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: () => onServer(baseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}
