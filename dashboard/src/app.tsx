/**
 * The shell: sign-in when there is neither a token nor a single sign-on
 * session, otherwise the header with navigation and the screen of the current
 * route. A token or session the server refuses signs the tab out with a message.
 */
import { Suspense, lazy, useEffect, useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { createClient } from "@connectrpc/connect";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { clearToken, getToken, setToken } from "./session.ts";
import { errorMessage, isUnauthenticated, transport } from "./transport.ts";
import { href, useRoute } from "./router.ts";
import { Loading } from "./ui.tsx";
import { SSO_LOGIN_PATH, signOutOfSingleSignOn, singleSignOnStatus } from "./single-sign-on.ts";

// The screens (and the chart library) load after sign-in: the first screen needs only this module.
const AppsScreen = lazy(() => import("./screens/apps.tsx").then((m) => ({ default: m.AppsScreen })));
const AppScreen = lazy(() => import("./screens/app.tsx").then((m) => ({ default: m.AppScreen })));
const OverviewScreen = lazy(() => import("./screens/overview.tsx").then((m) => ({ default: m.OverviewScreen })));
const OperatorsScreen = lazy(() => import("./screens/operators.tsx").then((m) => ({ default: m.OperatorsScreen })));
const AuditScreen = lazy(() => import("./screens/audit.tsx").then((m) => ({ default: m.AuditScreen })));

/** How this tab is signed in: with a token it keeps, with the session cookie, not at all, or not known yet. */
type SignedIn = "token" | "sso" | null | undefined;

export function App() {
  const [signedIn, setSignedIn] = useState<SignedIn>(() => (getToken() !== null ? "token" : undefined));
  const [notice, setNotice] = useState<string | null>(null);
  const [ssoEnabled, setSsoEnabled] = useState(false);
  const queryClient = useQueryClient();

  useEffect(() => {
    // Whether the server offers single sign-on, and (without a token) whether this browser holds a session.
    let live = true;
    void singleSignOnStatus().then((status) => {
      if (!live) return;
      setSsoEnabled(status.enabled);
      setSignedIn((now) => (now !== undefined ? now : status.signedIn ? "sso" : null));
    });
    return () => {
      live = false;
    };
  }, []);

  useEffect(() => {
    // Any request refused as unauthenticated (the token was rotated) signs out.
    return queryClient.getQueryCache().subscribe((event) => {
      if (event.type === "updated" && isUnauthenticated(event.query.state.error)) {
        const hadToken = getToken() !== null;
        clearToken();
        queryClient.clear();
        setNotice(
          hadToken
            ? "The admin token was refused. Sign in again."
            : "Your session expired or was signed out. Sign in again.",
        );
        setSignedIn(null);
      }
    });
  }, [queryClient]);

  if (signedIn === undefined) return <Loading what="the dashboard" />;
  if (signedIn === null) {
    return (
      <SignIn
        notice={notice}
        sso={ssoEnabled}
        onSignedIn={() => {
          setNotice(null);
          setSignedIn("token");
        }}
      />
    );
  }
  return (
    <Shell
      onSignOut={() => {
        clearToken();
        queryClient.clear();
        // The session ends on the server before the sign-in screen shows: nothing signed in is left behind.
        void (signedIn === "sso" ? signOutOfSingleSignOn() : Promise.resolve())
          .catch(() => undefined)
          .then(() => {
            setNotice("Signed out.");
            setSignedIn(null);
          });
      }}
    />
  );
}

function SignIn({ notice, sso, onSignedIn }: { notice: string | null; sso: boolean; onSignedIn: () => void }) {
  const [token, setTokenText] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const signIn = async () => {
    setBusy(true);
    setError(null);
    setToken(token.trim());
    try {
      // The cheapest admin call proves the token before anything else is shown.
      await createClient(AdminService, transport).whoAmI({});
      onSignedIn();
    } catch (err) {
      clearToken();
      setError(
        isUnauthenticated(err)
          ? "That token was refused. Use ADMIN_TOKEN (or the token file in the data directory) or an operator's token, and try again."
          : errorMessage(err),
      );
    } finally {
      setBusy(false);
    }
  };
  return (
    <main className="signin">
      <form
        className="card"
        onSubmit={(e) => {
          e.preventDefault();
          void signIn();
        }}
      >
        <h1>Platform Batteries</h1>
        <p className="muted">
          {sso
            ? "Sign in through the platform's identity provider, or with the admin token or your operator token (a token is kept in this tab only)."
            : "Sign in with the platform's admin token or your operator token. It is kept in this tab only."}
        </p>
        {notice ? <p role="status">{notice}</p> : null}
        {sso ? (
          <>
            <a className="sso-button" href={SSO_LOGIN_PATH}>
              Sign in with single sign-on
            </a>
            <p className="muted sso-or">or with a token</p>
          </>
        ) : null}
        <label className="field">
          <span>Admin token</span>
          <input
            type="password"
            value={token}
            onChange={(e) => setTokenText(e.target.value)}
            autoComplete="off"
            required
            autoFocus
          />
        </label>
        {error ? (
          <div className="error" role="alert">
            {error}
          </div>
        ) : null}
        <button type="submit" disabled={busy || token.trim() === ""}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

/**
 * After a navigation, focus moves to the new screen's heading, so a screen
 * reader announces where the operator is and the keyboard starts there
 * (the heading appears once the screen and its data have loaded).
 */
function useFocusHeadingOnNavigation(key: string) {
  // The key the focus was last moved for: the first screen after sign-in keeps the browser's focus.
  const settled = useRef(key);
  useEffect(() => {
    if (settled.current === key) return;
    settled.current = key;
    const main = document.getElementById("main");
    if (!main) return;
    // While the next screen loads, React keeps the previous one in the DOM, hidden: only a heading that
    // is shown takes the focus.
    const focus = () => {
      const heading = [...main.querySelectorAll("h1")].find((h) => h.checkVisibility());
      if (!heading) return false;
      heading.tabIndex = -1;
      heading.focus();
      return document.activeElement === heading;
    };
    if (focus()) return;
    const observer = new MutationObserver(() => focus() && observer.disconnect());
    observer.observe(main, { childList: true, subtree: true });
    const timer = setTimeout(() => observer.disconnect(), 5000);
    return () => {
      observer.disconnect();
      clearTimeout(timer);
    };
  }, [key]);
}

const MAIN_NAV = [
  ["overview", "Overview"],
  ["apps", "Apps"],
  ["operators", "Operators"],
  ["audit", "Audit log"],
] as const;

function Shell({ onSignOut }: { onSignOut: () => void }) {
  const route = useRoute();
  useFocusHeadingOnNavigation(href(route));
  return (
    <div className="shell">
      <a
        className="skip-link"
        href="#main"
        onClick={(e) => {
          // The hash is the router's: move the focus without changing it.
          e.preventDefault();
          const main = document.getElementById("main");
          main?.focus();
        }}
      >
        Skip to content
      </a>
      <header className="topbar">
        <a className="brand" href="#/">
          Platform Batteries
        </a>
        <nav aria-label="Main">
          {MAIN_NAV.map(([screen, label]) => (
            <a
              key={screen}
              href={href({ screen })}
              aria-current={
                route.screen === screen || (screen === "apps" && route.screen === "app") ? "page" : undefined
              }
            >
              {label}
            </a>
          ))}
        </nav>
        <button type="button" className="secondary" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <main className="content" id="main" tabIndex={-1}>
        <Suspense fallback={<Loading what="the screen" />}>
          {route.screen === "overview" ? <OverviewScreen /> : null}
          {route.screen === "apps" ? <AppsScreen /> : null}
          {route.screen === "operators" ? <OperatorsScreen /> : null}
          {route.screen === "audit" ? <AuditScreen /> : null}
          {/* Keyed by the app: edits made on one app never stay in the forms of the next. */}
          {route.screen === "app" ? <AppScreen key={route.appId} appId={route.appId} tab={route.tab} /> : null}
        </Suspense>
      </main>
    </div>
  );
}
