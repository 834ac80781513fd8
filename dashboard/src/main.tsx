/**
 * The operator dashboard's entry: TanStack Query over the Connect transport.
 * Lists refresh every few seconds while the tab is visible; a hidden tab
 * makes no requests (TanStack pauses intervals in the background).
 */
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { TransportProvider } from "@connectrpc/connect-query";
import { transport } from "./transport.ts";
import { App } from "./app.tsx";
import "./styles.css";

const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      refetchInterval: 5000,
      refetchIntervalInBackground: false,
      refetchOnWindowFocus: true,
      retry: (failures, err) =>
        failures < 2 && !(err instanceof Error && /unauthenticated|invalid|not found|not_found/i.test(err.message)),
      staleTime: 2000,
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <TransportProvider transport={transport}>
      <QueryClientProvider client={queryClient}>
        <App />
      </QueryClientProvider>
    </TransportProvider>
  </StrictMode>,
);
