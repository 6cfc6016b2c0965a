package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	criSocket  = "/run/netshim/netshim.sock"
	kubeletURL = "https://127.0.0.1:10250"
)

// env reaches the node's parts: commands, netshim's CRI socket, kubelet.
type env struct {
	http *http.Client
}

func newEnv() *env {
	return &env{http: &http.Client{
		Timeout: 30 * time.Second,
		// kubelet's serving certificate is self-signed on a node without
		// an API server; the address is the node's loopback.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}}
}

// run runs a command with a deadline and returns its combined output.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=", "LC_ALL=C")
	b, err := cmd.CombinedOutput()
	out := strings.TrimSpace(string(b))
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(out, 600))
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// poll calls fn every interval until it succeeds or timeout passed; the
// error is fn's last, with how long it was tried.
func poll(timeout, interval time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// unitProps reads systemd properties of a unit.
func unitProps(unit string, props ...string) (map[string]string, error) {
	args := []string{"show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := run(30*time.Second, "systemctl", args...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// wantProps fails unless each property has the wanted value.
func wantProps(unit string, want map[string]string) error {
	var names []string
	for k := range want {
		names = append(names, k)
	}
	got, err := unitProps(unit, names...)
	if err != nil {
		return err
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s: %s=%q, want %q", unit, k, got[k], v)
		}
	}
	return nil
}

// withCRI calls fn on a fresh connection to netshim's socket, with a
// deadline of its own.
func withCRI[T any](fn func(context.Context, runtimeapi.RuntimeServiceClient) (T, error)) (T, error) {
	var zero T
	conn, err := grpc.NewClient("unix://"+criSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return zero, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return fn(ctx, runtimeapi.NewRuntimeServiceClient(conn))
}

// sandboxes lists the pod sandboxes netshim reports (all states).
func sandboxes() ([]*runtimeapi.PodSandbox, error) {
	return withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) ([]*runtimeapi.PodSandbox, error) {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return nil, fmt.Errorf("ListPodSandbox: %w", err)
		}
		return resp.Items, nil
	})
}

func containers() ([]*runtimeapi.Container, error) {
	return withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) ([]*runtimeapi.Container, error) {
		resp, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return nil, fmt.Errorf("ListContainers: %w", err)
		}
		return resp.Containers, nil
	})
}

func containerStatus(id string) (*runtimeapi.ContainerStatusResponse, error) {
	return withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) (*runtimeapi.ContainerStatusResponse, error) {
		return c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	})
}

func sandboxStatus(id string) (*runtimeapi.PodSandboxStatusResponse, error) {
	return withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) (*runtimeapi.PodSandboxStatusResponse, error) {
		return c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	})
}

func runtimeStatus() (*runtimeapi.StatusResponse, error) {
	return withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) (*runtimeapi.StatusResponse, error) {
		return c.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	})
}

// removeSandbox stops and removes a sandbox, as kubelet's garbage
// collection does.
func removeSandbox(id string) error {
	_, err := withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) (any, error) {
		if _, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return nil, err
		}
		return c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	})
	return err
}

func updateResources(id string, r *runtimeapi.LinuxContainerResources) error {
	_, err := withCRI(func(ctx context.Context, c runtimeapi.RuntimeServiceClient) (any, error) {
		return c.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: r})
	})
	return err
}

// kubeletGet reads a path of kubelet's API (anonymous, AlwaysAllow: the
// node's own loopback).
func (e *env) kubeletGet(path string, v any) error {
	resp, err := e.http.Get(kubeletURL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, tail(string(b), 300))
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
