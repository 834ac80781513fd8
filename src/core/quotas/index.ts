export {
  CAP_LIMITS,
  createQuotas,
  reservationSweepTask,
  RESERVATION_HOLD_SECONDS,
  utcDay,
  withReservation,
  type QuotaCounter,
  type Quotas,
  type SpendStatement,
} from "./quotas.ts";
