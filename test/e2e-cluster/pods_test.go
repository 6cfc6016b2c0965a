//go:build cluster

package e2ecluster

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestVolumes: ConfigMap, Secret, downward API and emptyDir volumes (disk
// and memory) carry what the API says into the container, with the modes
// and read-only mounts asked for, and an emptyDir is shared between two
// containers.
func TestVolumes(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
data:
  greeting: hello-from-configmap
---
apiVersion: v1
kind: Secret
metadata:
  name: sec
stringData:
  password: s3cr3t-value
---
apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {team: netshim, tier: e2e}
  annotations: {note: volumes-check}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "exec sleep 3600"]
    env:
    - name: MY_POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    resources:
      limits: {memory: 64Mi}
    volumeMounts:
    - {name: cfg, mountPath: /etc/cfg}
    - {name: sec, mountPath: /etc/sec}
    - {name: info, mountPath: /etc/info}
    - {name: shared, mountPath: /shared}
    - {name: mem, mountPath: /mem}
  - name: writer
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo written-by-writer > /shared/note; exec sleep 3600"]
    volumeMounts:
    - {name: shared, mountPath: /shared}
  volumes:
  - name: cfg
    configMap: {name: cfg}
  - name: sec
    secret: {secretName: sec, defaultMode: 0400}
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: namespace, fieldRef: {fieldPath: metadata.namespace}}
      - path: mem_limit_mi
        resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}
  - name: shared
    emptyDir: {}
  - name: mem
    emptyDir: {medium: Memory}
`, busybox))
	p := waitReady(t, ns, "vols")
	execIn := func(cmd string) string {
		t.Helper()
		return kubectl(t, "exec", "-n", ns, "vols", "-c", "app", "--", "sh", "-c", cmd)
	}
	checks := []struct{ what, cmd, want string }{
		{"configMap key", "cat /etc/cfg/greeting", "hello-from-configmap"},
		{"secret key", "cat /etc/sec/password", "s3cr3t-value"},
		{"secret mode", "stat -L -c %a /etc/sec/password", "400"},
		{"downward name", "cat /etc/info/name", "vols"},
		{"downward namespace", "cat /etc/info/namespace", ns},
		{"downward labels", "sort /etc/info/labels", "team=\"netshim\"\ntier=\"e2e\""},
		{"downward annotations", "grep note= /etc/info/annotations", `note="volumes-check"`},
		{"downward resource", "cat /etc/info/mem_limit_mi", "64"},
		{"pod IP env", "echo $MY_POD_IP", p.Status.PodIP},
		{"emptyDir shared", "cat /shared/note", "written-by-writer"},
		{"emptyDir medium Memory", "awk '$2 == \"/mem\" {print $3}' /proc/mounts", "tmpfs"},
		{"configMap read-only", "touch /etc/cfg/x 2>/dev/null && echo writable || echo read-only", "read-only"},
		{"emptyDir writable", "echo x > /mem/f && cat /mem/f", "x"},
	}
	for _, c := range checks {
		if got := strings.TrimSpace(execIn(c.cmd)); got != c.want {
			t.Errorf("%s: `%s` printed %q, want %q", c.what, c.cmd, got, c.want)
		}
	}
	// The other way: what the writer wrote is what the app reads, and
	// the app's write shows in the writer.
	execIn("echo from-app > /shared/back")
	if got := strings.TrimSpace(kubectl(t, "exec", "-n", ns, "vols", "-c", "writer", "--", "cat", "/shared/back")); got != "from-app" {
		t.Errorf("emptyDir: the writer reads %q, want from-app", got)
	}
}

// TestInitContainers: init containers run to completion one after the
// other before the app starts, and a failing one is retried until it
// succeeds.
func TestInitContainers(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: inits
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: first
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo first >> /work/log"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: second
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "test \"$(cat /work/log)\" = first && echo second >> /work/log"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: flaky
    image: %[1]s
    imagePullPolicy: Never
    # Fails on its first run only.
    command: ["sh", "-c", "if [ -e /work/tried ]; then echo flaky >> /work/log; else touch /work/tried; exit 1; fi"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: app
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "cat /work/log; exec sleep 3600"]
    volumeMounts: [{name: work, mountPath: /work}]
  volumes:
  - name: work
    emptyDir: {}
`, busybox))
	p := waitReady(t, ns, "inits")
	var prevEnd time.Time
	for _, name := range []string{"first", "second", "flaky"} {
		c := p.container(name)
		if c == nil || c.State.Terminated == nil {
			t.Errorf("init container %s: %+v, want terminated", name, c)
			continue
		}
		term := c.State.Terminated
		if term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("init container %s: exit %d (%s), want 0 (Completed)", name, term.ExitCode, term.Reason)
		}
		start, err1 := time.Parse(time.RFC3339, term.StartedAt)
		end, err2 := time.Parse(time.RFC3339, term.FinishedAt)
		if err1 != nil || err2 != nil {
			t.Errorf("init container %s: times %q %q", name, term.StartedAt, term.FinishedAt)
			continue
		}
		if start.Before(prevEnd) {
			t.Errorf("init container %s started at %s, before the one before it finished (%s)", name, start, prevEnd)
		}
		prevEnd = end
	}
	if c := p.container("flaky"); c != nil && c.RestartCount < 1 {
		t.Errorf("init container flaky failed once but restartCount = %d", c.RestartCount)
	}
	if got := kubectl(t, "logs", "-n", ns, "inits", "-c", "app"); got != "first\nsecond\nflaky\n" {
		t.Errorf("the app read %q, want first, second, flaky in order", got)
	}
}

// TestProbes: exec, HTTP and TCP probes run and act: a startup TCP probe
// holds the others back until the port opens, an HTTP readiness probe
// moves the Ready condition both ways, a failing exec liveness probe
// restarts the container, and a startup probe that never passes restarts
// it too.
func TestProbes(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %[1]s
    imagePullPolicy: Never
    # The server comes up 3 s late: the startup probe waits for it.
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/healthz && touch /tmp/alive && sleep 3 && exec httpd -f -p 8080 -h /www"]
    startupProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      exec: {command: ["test", "-f", "/tmp/alive"]}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: never-starts
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "exec sleep 3600"]
    startupProbe:
      tcpSocket: {port: 9999}
      periodSeconds: 1
      failureThreshold: 2
`, busybox))
	p := waitReady(t, ns, "probed")
	c := p.container("app")
	if c.Started == nil || !*c.Started || c.RestartCount != 0 {
		t.Fatalf("probed: started %v, restarts %d; want started, no restart", c.Started, c.RestartCount)
	}
	execIn := func(cmd string) {
		t.Helper()
		kubectl(t, "exec", "-n", ns, "probed", "--", "sh", "-c", cmd)
	}

	// HTTP readiness, both ways.
	execIn("rm /www/healthz")
	waitPod(t, ns, "probed", "unready once /healthz is gone", func(p *pod) bool { return p.condition("Ready") == "False" })
	execIn("echo ok > /www/healthz")
	waitReady(t, ns, "probed")

	// Exec liveness: the container is killed and started again.
	execIn("rm /tmp/alive")
	p = waitPod(t, ns, "probed", "restarted by its liveness probe", func(p *pod) bool {
		return p.container("app").RestartCount >= 1
	})
	if term := p.container("app").LastState.Terminated; term == nil {
		t.Errorf("restarted, but no last terminated state: %+v", p.container("app"))
	}
	waitReady(t, ns, "probed")

	// TCP startup that never passes: never started, never ready, restarted.
	p = waitPod(t, ns, "never-starts", "restarted by its startup probe", func(p *pod) bool {
		return p.container("app").RestartCount >= 1
	})
	if c := p.container("app"); (c.Started != nil && *c.Started) || c.Ready {
		t.Errorf("never-starts: started %v ready %v, want neither", c.Started, c.Ready)
	}
}
