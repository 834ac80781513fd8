/**
 * Readiness of an AWS dependency (SES, Bedrock): the mail and inference
 * facilities' `/ready` checks share this one rule.
 */

/**
 * An AWS service counts as reachable when it answers at all: any HTTP status,
 * an error response included (the call itself may be refused by IAM), but
 * not a network failure. `$metadata.httpStatusCode` is set only when an HTTP
 * answer came back.
 */
export async function awsAnswers(call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch (err) {
    const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
    if (status === undefined) throw err;
  }
}
