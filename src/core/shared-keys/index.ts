/** What instances on one database must share: the secrets key and the admin token. */
export {
  adoptAdminToken,
  checkSecretsKeyMove,
  readSharedKeys,
  recordSecretsKey,
  verifySharedKeys,
} from "./shared-keys.ts";
