export {
  CAP_LIMITS,
  createQuotas,
  reservationSweepTask,
  RESERVATION_HOLD_SECONDS,
  utcDay,
  withReservation,
  type QuotaCounter,
  type Quotas,
  type Reservation,
  type SpendStatement,
  type ReservationOptions,
} from "./quotas.ts";
