/**
 * The actions the audit screen's filter offers: the server's own list (plain
 * data, shared rather than copied, so a new action is offered the day it is
 * recorded), sorted for the menu.
 */
import { AUDIT_ACTIONS } from "../../src/admin/audit-actions.ts";

export const AUDIT_FILTER_ACTIONS: readonly string[] = [...AUDIT_ACTIONS].sort();
