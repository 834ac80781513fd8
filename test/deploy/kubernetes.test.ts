/**
 * The Kubernetes manifests (`deploy/kubernetes/`, Kustomize): every object the
 * kustomization renders is valid against the Kubernetes schemas
 * (`kubernetes-models`, offline), and they agree with each other and with the
 * Containerfile where a mistake would only show in a cluster: labels and
 * selectors, ports, probe paths, the Secret keys read, the *_FILE paths, the
 * non-root user, and a writable directory for everything written under a
 * read-only root filesystem.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";

const root = path.resolve(import.meta.dirname, "../..");
const DIR = path.join(root, "deploy/kubernetes");
const containerfile = fs.readFileSync(path.join(root, "Containerfile"), "utf8");

type Labels = Record<string, string>;
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Labels };
  [field: string]: unknown;
}
interface Probe {
  httpGet?: { path: string; port: string | number };
}
interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: { name: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  envFrom?: { configMapRef?: { name: string } }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  securityContext?: { allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean };
  volumeMounts?: { name: string; mountPath: string }[];
}
interface PodSpec {
  serviceAccountName: string;
  terminationGracePeriodSeconds: number;
  securityContext: { runAsNonRoot: boolean; runAsUser: number; runAsGroup: number };
  initContainers: Container[];
  containers: Container[];
  volumes: {
    name: string;
    secret?: { secretName: string; items: { key: string; path: string }[] };
    emptyDir?: object;
  }[];
}
interface Deployment extends K8sObject {
  spec: { selector: { matchLabels: Labels }; template: { metadata: { labels: Labels }; spec: PodSpec } };
}

interface Kustomization {
  resources: string[];
  images: { name: string; newName: string; newTag: string }[];
}

function load(file: string): K8sObject[] {
  return parseAllDocuments(fs.readFileSync(path.join(DIR, file), "utf8")).map((d) => d.toJS() as K8sObject);
}

const kustomization = load("kustomization.yaml")[0] as unknown as Kustomization;

/** What `kustomize build` makes of these resources: they, with the kustomization's image set. */
function render(): K8sObject[] {
  const objects = kustomization.resources.flatMap(load);
  const images = new Map(kustomization.images.map((i) => [i.name, `${i.newName}:${i.newTag}`]));
  for (const object of objects) {
    const pod = (object as Partial<Deployment>).spec?.template?.spec;
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])])
      c.image = images.get(c.image) ?? c.image;
  }
  return objects;
}

/** The kubernetes-models class of an object's apiVersion and kind (core "v1" has no group). */
async function modelOf(object: K8sObject): Promise<new (data: object) => { validate(): void }> {
  const module = (await import(`kubernetes-models/${object.apiVersion}/${object.kind}`)) as Record<
    string,
    new (data: object) => { validate(): void }
  >;
  return module[object.kind];
}

async function validate(object: K8sObject): Promise<void> {
  const Model = await modelOf(object);
  new Model(object).validate();
}

const objects = render();
const find = <T extends K8sObject>(kind: string) => {
  const found = objects.filter((o) => o.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0] as T;
};
const matches = (selector: Labels, labels: Labels) =>
  Object.entries(selector).every(([key, value]) => labels[key] === value);

describe("deploy/kubernetes", () => {
  it("lists every manifest in the kustomization, the example Secret aside", () => {
    const files = fs.readdirSync(DIR).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    expect([...kustomization.resources, "secret.example.yaml"].sort()).toEqual(files.sort());
  });

  it("renders objects that are valid against the Kubernetes schemas, which refuse a broken one", async () => {
    expect(objects.map((o) => o.kind).sort()).toEqual(
      ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "ServiceAccount"].sort(),
    );
    for (const object of [...objects, ...load("secret.example.yaml")]) await validate(object);

    const broken = structuredClone(find<Deployment>("Deployment"));
    (broken.spec.template.spec.containers[0].ports![0] as { containerPort: unknown }).containerPort = "8080";
    await expect(validate(broken)).rejects.toThrow(/containerPort/);
    const noSelector = structuredClone(find<Deployment>("Deployment")) as { spec: { selector?: unknown } };
    delete noSelector.spec.selector;
    await expect(validate(noSelector as unknown as K8sObject)).rejects.toThrow(/selector/);
  });

  const deployment = find<Deployment>("Deployment");
  const pod = deployment.spec.template.spec;
  const server = pod.containers.find((c) => c.name === "server")!;
  const migrate = pod.initContainers.find((c) => c.name === "migrate")!;
  const podLabels = deployment.spec.template.metadata.labels;

  it("selects the Deployment's pods from the Service, the budget and the autoscaler", () => {
    expect(matches(deployment.spec.selector.matchLabels, podLabels)).toBe(true);
    const service = find<K8sObject & { spec: { selector: Labels } }>("Service");
    expect(matches(service.spec.selector, podLabels)).toBe(true);
    const budget = find<K8sObject & { spec: { selector: { matchLabels: Labels }; minAvailable: number } }>(
      "PodDisruptionBudget",
    );
    expect(matches(budget.spec.selector.matchLabels, podLabels)).toBe(true);
    const hpa = find<
      K8sObject & { spec: { scaleTargetRef: { kind: string; name: string }; minReplicas: number; maxReplicas: number } }
    >("HorizontalPodAutoscaler");
    expect(hpa.spec.scaleTargetRef).toMatchObject({ kind: "Deployment", name: deployment.metadata.name });
    // With one replica the budget would block every drain.
    expect(hpa.spec.minReplicas).toBeGreaterThan(budget.spec.minAvailable);
    expect(pod.serviceAccountName).toBe(find("ServiceAccount").metadata.name);
    expect(server.envFrom?.[0].configMapRef?.name).toBe(find("ConfigMap").metadata.name);
  });

  it("serves the image's port as h2c, readiness on /ready and liveness on /health", () => {
    const exposed = Number(/^EXPOSE (\d+)$/m.exec(containerfile)?.[1]);
    const port = server.ports!.find((p) => p.containerPort === exposed);
    expect(port, `a container port ${exposed}`).toBeDefined();
    const service = find<K8sObject & { spec: { ports: { targetPort: string; appProtocol: string }[] } }>("Service");
    expect(service.spec.ports).toHaveLength(1);
    expect(service.spec.ports[0]).toMatchObject({ targetPort: port!.name, appProtocol: "kubernetes.io/h2c" });
    expect(server.readinessProbe?.httpGet).toEqual({ path: "/ready", port: port!.name });
    expect(server.livenessProbe?.httpGet).toEqual({ path: "/health", port: port!.name });
    expect(server.startupProbe?.httpGet).toEqual({ path: "/health", port: port!.name });
  });

  it("migrates in an init container of the same image before the server starts", () => {
    expect(migrate.image).toBe(server.image);
    expect(migrate.image).toMatch(/:[\w.-]+$/);
    expect(migrate.args).toEqual(["src/cli.ts", "migrate"]);
    const url = (c: Container) => c.env?.find((e) => e.name === "DATABASE_URL")?.valueFrom?.secretKeyRef;
    expect(url(migrate)).toBeDefined();
    expect(url(migrate)).toEqual(url(server));
  });

  it("reads only keys the Secret has, and the *_FILE variables name its mounted files", () => {
    const secret = load("secret.example.yaml")[0] as K8sObject & { stringData: Record<string, string> };
    for (const c of [migrate, server]) {
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (!ref) continue;
        expect(ref.name).toBe(secret.metadata.name);
        expect(Object.keys(secret.stringData), `${c.name}: ${e.name}`).toContain(ref.key);
      }
    }
    const env = new Map(server.env!.map((e) => [e.name, e]));
    expect(env.has("SECRETS_KEY") || env.has("ADMIN_TOKEN"), "keys as plain environment variables").toBe(false);
    const keys = pod.volumes.find((v) => v.secret)!;
    expect(keys.secret!.secretName).toBe(secret.metadata.name);
    const mount = server.volumeMounts!.find((m) => m.name === keys.name)!;
    for (const variable of ["SECRETS_KEY_FILE", "ADMIN_TOKEN_FILE"]) {
      const file = env.get(variable)?.value ?? "";
      expect(path.dirname(file), variable).toBe(mount.mountPath);
      const item = keys.secret!.items.find((i) => i.path === path.basename(file));
      expect(item, variable).toBeDefined();
      expect(Object.keys(secret.stringData)).toContain(item!.key);
    }
  });

  it("runs as the image's non-root user on a read-only root, writing only to pod-local directories", () => {
    const [uid, gid] = (/^USER (\d+):(\d+)$/m.exec(containerfile) ?? []).slice(1).map(Number);
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: uid, runAsGroup: gid });
    const emptyDirs = new Set(pod.volumes.filter((v) => v.emptyDir).map((v) => v.name));
    for (const c of [migrate, server]) {
      expect(c.securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true });
      const writable = (c.volumeMounts ?? []).filter((m) => emptyDirs.has(m.name)).map((m) => m.mountPath);
      expect(writable, c.name).toContain("/tmp"); // Node's compile cache, in the OS temporary directory
    }
    const dataDir = /^\s+DATA_DIR=(\S+)/m.exec(containerfile)?.[1];
    expect(server.volumeMounts!.filter((m) => emptyDirs.has(m.name)).map((m) => m.mountPath)).toContain(dataDir);
    // The drain after SIGTERM takes up to 30 s (src/run-server.ts), after preStop's pause.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(30 + 5);
  });
});
