export {
  CAP_LIMITS,
  createQuotas,
  utcDay,
  withReservation,
  type QuotaCounter,
  type Quotas,
  type Reservation,
  type ReservationOptions,
} from "./quotas.ts";
