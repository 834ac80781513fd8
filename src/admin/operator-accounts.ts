/**
 * Named operators and their tokens (WhoAmI, Create/List/Update/DeleteOperator,
 * Issue/Revoke/ListOperatorTokens). Tokens are `pbo_` + 256 random bits,
 * stored only as their SHA-256 and shown once. The bootstrap `ADMIN_TOKEN` is
 * the built-in operator "owner": not a row, so it can be neither changed nor
 * deleted here. Every change is audited in its own transaction.
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { OperatorRole, type AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { isUuid } from "../core/apps/apps.ts";
import { OWNER, generateOperatorToken, hashToken } from "../core/auth.ts";
import type { Db } from "../core/database/index.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import {
  createOperatorStore,
  type OperatorRecord,
  type OperatorRole as Role,
} from "../core/operators/operator-store.ts";
import { operatorOf, type Auditor } from "./auditor.ts";
import { tokenMessage } from "./token-usage.ts";

export type OperatorAccountRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "whoAmI"
  | "createOperator"
  | "listOperators"
  | "updateOperator"
  | "deleteOperator"
  | "issueOperatorToken"
  | "revokeOperatorToken"
  | "listOperatorTokens"
>;

/** Operator names: a person or a tool, as the audit log shows them. */
const OPERATOR_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,63}$/;
const OPERATOR_NAME_RULE =
  "must be 1 to 64 letters, digits, spaces, dots, underscores, @ or hyphens, starting with a letter or digit";

const ROLE_OF: Record<Role, OperatorRole> = { admin: OperatorRole.ADMIN, viewer: OperatorRole.VIEWER };

function role(value: OperatorRole, field: string): Role {
  if (value === OperatorRole.ADMIN) return "admin";
  if (value === OperatorRole.VIEWER) return "viewer";
  throw invalidArgument(field, "must be OPERATOR_ROLE_ADMIN or OPERATOR_ROLE_VIEWER");
}

function operatorMessage(o: OperatorRecord) {
  return {
    id: o.id,
    name: o.name,
    role: ROLE_OF[o.role],
    disabled: o.disabled,
    createdAt: timestampFromDate(o.createdAt),
    lastUsedAt: o.lastUsedAt ? timestampFromDate(o.lastUsedAt) : undefined,
  };
}

function operatorId(id: string): string {
  if (id === OWNER.id)
    throw invalidArgument("operator_id", "the owner (ADMIN_TOKEN) is built in and cannot be changed");
  if (!isUuid(id)) throw invalidArgument("operator_id", "must be an operator id (a UUID)");
  return id;
}

function label(value: string | undefined): string {
  const text = value ?? "";
  if (text.length > 200) throw invalidArgument("label", "must be at most 200 characters");
  return text;
}

const notFound = (id: string) => new PlatformError("not_found", `no operator ${id}`);

export function createOperatorAccountRpcs(options: {
  db: Db;
  auditor: Auditor;
  /** Runs after every change that may end a token's or an operator's access. */
  onAuthChanged: () => void;
  /** When the bootstrap owner came to be, for WhoAmI. */
  startedAt: Date;
}): OperatorAccountRpcs {
  const { db, auditor, onAuthChanged } = options;
  const operators = createOperatorStore(db);

  // The built-in operator as WhoAmI and ListOperators show it: it exists since this instance started.
  const owner = () => ({
    id: OWNER.id,
    name: OWNER.name,
    role: OperatorRole.ADMIN,
    createdAt: timestampFromDate(options.startedAt),
  });

  return {
    async whoAmI(_req, context) {
      const me = operatorOf(context);
      if (me.id === OWNER.id) return { operator: owner() };
      const record = await operators.get(me.id);
      if (!record) throw notFound(me.id);
      return { operator: operatorMessage(record) };
    },

    async createOperator(req, context) {
      const name = req.name;
      const detail = { name, role: OperatorRole[req.role]?.toLowerCase() ?? String(req.role) };
      return auditor.audited(context, "operator.create", undefined, detail, async (tx) => {
        if (!OPERATOR_NAME_PATTERN.test(name) || name === OWNER.name)
          throw invalidArgument("name", OPERATOR_NAME_RULE + ", and not owner");
        const r = role(req.role, "role");
        const token = generateOperatorToken();
        const store = createOperatorStore(tx.db);
        const created = await store.create(name, r);
        if (!created) throw invalidArgument("name", `an operator named ${JSON.stringify(name)} exists already`);
        const tokenId = await store.insertToken(created.id, hashToken(token), "");
        return { operator: operatorMessage(created), tokenId, token };
      });
    },

    async listOperators() {
      // The owner first: the audit log names it as the operator of what the ADMIN_TOKEN did, so the
      // Operators screen and the audit log's operator filter must know it too.
      return { operators: [owner(), ...(await operators.list()).map(operatorMessage)] };
    },

    async updateOperator(req, context) {
      const detail: Record<string, unknown> = { operatorId: req.operatorId };
      if (req.role !== undefined) detail.role = OperatorRole[req.role]?.toLowerCase() ?? String(req.role);
      if (req.disabled !== undefined) detail.disabled = req.disabled;
      const result = await auditor.audited(context, "operator.update", undefined, detail, async (tx) => {
        const id = operatorId(req.operatorId);
        const changes = {
          role: req.role === undefined ? undefined : role(req.role, "role"),
          disabled: req.disabled,
        };
        const updated = await createOperatorStore(tx.db).update(id, changes);
        if (!updated) throw notFound(id);
        return { operator: operatorMessage(updated) };
      });
      onAuthChanged();
      return result;
    },

    async deleteOperator(req, context) {
      await auditor.audited(context, "operator.delete", undefined, { operatorId: req.operatorId }, async (tx) => {
        const id = operatorId(req.operatorId);
        if (!(await createOperatorStore(tx.db).delete(id))) throw notFound(id);
      });
      onAuthChanged();
      return {};
    },

    async issueOperatorToken(req, context) {
      const detail = { operatorId: req.operatorId, label: req.label ?? "" };
      return auditor.audited(context, "operator.token.issue", undefined, detail, async (tx) => {
        const id = operatorId(req.operatorId);
        const text = label(req.label);
        const token = generateOperatorToken();
        const store = createOperatorStore(tx.db);
        if (!(await store.get(id))) throw notFound(id);
        const tokenId = await store.insertToken(id, hashToken(token), text);
        return { tokenId, token };
      });
    },

    async revokeOperatorToken(req, context) {
      await auditor.audited(context, "operator.token.revoke", undefined, { tokenId: req.tokenId }, async (tx) => {
        if (!isUuid(req.tokenId)) throw invalidArgument("token_id", "must be a token id (a UUID)");
        const owner = await createOperatorStore(tx.db).deleteToken(req.tokenId);
        if (owner === undefined) throw new PlatformError("not_found", "no such operator token");
      });
      onAuthChanged();
      return {};
    },

    async listOperatorTokens(req) {
      const id = operatorId(req.operatorId);
      if (!(await operators.get(id))) throw notFound(id);
      const tokens = await operators.listTokens(id);
      return {
        tokens: tokens.map(tokenMessage),
      };
    },
  };
}
