/**
 * The audit action names, written once. Plain data without imports, so the
 * dashboard's audit filter can offer the same list the server records
 * (dashboard/src/screens/audit.tsx imports this file).
 */

/** The audit action of each write RPC; a viewer's attempt is recorded under it. */
export const RPC_ACTIONS: Readonly<Record<string, string>> = {
  createApp: "app.create",
  updateApp: "app.update",
  deleteApp: "app.delete",
  issueToken: "token.issue",
  revokeToken: "token.revoke",
  declareSecrets: "secrets.declare",
  addSecretNames: "secrets.add",
  removeSecretNames: "secrets.remove",
  setSecret: "secret.set",
  createSecretLink: "secret.link",
  revokeSecretLink: "secret.link.revoke",
  purgeQueue: "queue.purge",
  putTestMessage: "queue.put",
  replayDeadLetters: "dead_letters.replay",
  purgeDeadLetters: "dead_letters.purge",
  setQueuePolicy: "queue.policy",
  publishEvent: "event.publish",
  createOperator: "operator.create",
  updateOperator: "operator.update",
  deleteOperator: "operator.delete",
  issueOperatorToken: "operator.token.issue",
  revokeOperatorToken: "operator.token.revoke",
};

/**
 * Every action an audit entry may carry: those of the write RPCs, UpdateApp's
 * finer ones (only the status, only the limits), the CLI's changes made
 * directly on the database, and the dashboard's single sign-on sessions. docs/operators.md lists the same set, and
 * test/admin/audit-actions.test.ts fails when a recorded action is not here.
 */
export const AUDIT_ACTIONS: ReadonlySet<string> = new Set([
  ...Object.values(RPC_ACTIONS),
  "app.stop",
  "app.start",
  "app.limits",
  "secrets.rotate_key",
  "admin_token.adopt",
  "database.restore",
  "operator.sign_in",
  "operator.sign_out",
]);
