/**
 * The admin token of this browser tab. It lives in `sessionStorage` (gone
 * when the tab closes, never shared with other tabs), is sent only as the
 * bearer header of Connect calls, and never appears in a URL.
 */
const KEY = "platform-batteries.admin-token";

export function getToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}
