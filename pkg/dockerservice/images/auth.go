package images

import (
	"encoding/base64"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/registry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// dockerHubAuthServer is the server address the Docker CLI files Docker
// Hub credentials under.
const dockerHubAuthServer = "https://index.docker.io/v1/"

// registryAuth turns CRI credentials into Docker's X-Registry-Auth value:
// the base64url JSON of a registry.AuthConfig. No credentials give "" (an
// anonymous pull).
//
//   - username/password are passed as they are;
//   - auth ("user:password" in standard base64, the form of a Docker
//     config file) is decoded into username/password: the engine does not
//     read the auth field of X-Registry-Auth itself. An explicit username
//     wins over auth;
//   - identity_token (OAuth2 refresh token) and registry_token (bearer
//     token) are passed as they are.
//
// The server address is the CRI's when set, else the registry of the
// image (Docker Hub as the Docker CLI names it).
func registryAuth(auth *runtimeapi.AuthConfig, named reference.Named) (string, error) {
	if auth == nil {
		return "", nil
	}
	ac := registry.AuthConfig{
		Username:      auth.GetUsername(),
		Password:      auth.GetPassword(),
		IdentityToken: auth.GetIdentityToken(),
		RegistryToken: auth.GetRegistryToken(),
		ServerAddress: auth.GetServerAddress(),
	}
	if ac.Username == "" && auth.GetAuth() != "" {
		user, pass, err := decodeBasicAuth(auth.GetAuth())
		if err != nil {
			return "", err
		}
		ac.Username, ac.Password = user, pass
	}
	if ac.Username == "" && ac.Password == "" && ac.IdentityToken == "" && ac.RegistryToken == "" {
		return "", nil
	}
	if ac.ServerAddress == "" {
		ac.ServerAddress = registryServer(named)
	}
	return registry.EncodeAuthConfig(ac)
}

// registryServer is the registry host of a normalised reference.
func registryServer(named reference.Named) string {
	domain := reference.Domain(named)
	if domain == "docker.io" {
		return dockerHubAuthServer
	}
	return domain
}

// decodeBasicAuth decodes the auth field: base64 of "user:password".
func decodeBasicAuth(s string) (user, pass string, err error) {
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// Tolerate unpadded input, as some credential helpers write it.
		var err2 error
		if data, err2 = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); err2 != nil {
			return "", "", crirpc.InvalidArgf("invalid auth in AuthConfig: not base64: %v", err)
		}
	}
	user, pass, ok := strings.Cut(string(data), ":")
	if !ok || user == "" {
		return "", "", crirpc.InvalidArgf("invalid auth in AuthConfig: want base64 of \"username:password\"")
	}
	return user, pass, nil
}
