/** The `/v1/mail` route (docs/api.md#mail), mapped onto `MailService`. */
import { z } from "zod";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { jsonObject } from "../core/http/validation.ts";

/** The JSON shape of `POST /v1/mail/send`; missing fields become "" and get the implementation's "is required". */
const SendBody = jsonObject({
  to: z.string().default(""),
  subject: z.string().default(""),
  text: z.string().default(""),
});

/** The 200 body of `POST /v1/mail/send` (the OpenAPI document's response shape). */
const SendResponse = z.object({ sent: z.boolean(), from: z.string(), remainingToday: z.number().int() });

export const mailRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "POST",
    url: "/v1/mail/send",
    rpc: MailService.method.sendMail,
    idempotent: true,
    responseSchema: SendResponse,
    doc: {
      summary: "Send an email from the app's own address",
      errors: ["app_stopped", "quota_exceeded", "not_configured", "upstream_error"],
      requestExample: { to: "user@example.com", subject: "Welcome", text: "Thanks for signing up." },
      responseExample: { sent: true, from: "my-app@mail.platform.example", remainingToday: 99 },
    },
    body: SendBody,
    request: ({ body }) => body,
    response: (out) => ({ sent: out.sent, from: out.from, remainingToday: Number(out.remainingToday) }),
  }),
];
