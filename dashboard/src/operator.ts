/**
 * Who is signed in (WhoAmI) and what their role allows. A viewer sees no
 * write controls; the server refuses a viewer's write anyway, so hiding them
 * is for clarity, not for safety.
 */
import { useQuery } from "@connectrpc/connect-query";
import { whoAmI } from "../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { OperatorRole, type Operator } from "../../gen/platform/admin/v1/admin_pb.js";

export function useOperator(): { operator: Operator | undefined; canWrite: boolean } {
  const me = useQuery(whoAmI, {}, { refetchInterval: 60_000, staleTime: 30_000 });
  const operator = me.data?.operator;
  // Until WhoAmI answers, write controls stay hidden: a viewer never sees one flash by.
  return { operator, canWrite: operator?.role === OperatorRole.ADMIN };
}

export const ROLE_LABELS: Record<OperatorRole, string> = {
  [OperatorRole.UNSPECIFIED]: "unknown",
  [OperatorRole.ADMIN]: "admin",
  [OperatorRole.VIEWER]: "viewer",
};
