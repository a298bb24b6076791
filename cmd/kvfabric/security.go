package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// securityFlags are the flags of commands that reach a remote master, each
// mapped to its configuration key (docs/security.md).
var securityFlags = []struct{ flag, key, usage string }{
	{"tls-ca-file", "tls_ca_file", "PEM CA that signed the master's certificate (turns on TLS)"},
	{"tls-cert-file", "tls_cert_file", "PEM client certificate (mutual TLS; its subject CN is this client's principal)"},
	{"tls-key-file", "tls_key_file", "PEM private key of --tls-cert-file"},
	{"tls-server-name", "tls_server_name", "name to verify in the master's certificate (default: the address's host)"},
	{"auth-token-file", "auth_token_file", "file holding a bearer token (needs --tls-ca-file)"},
}

func addSecurityFlags(cmd *cobra.Command) {
	for _, f := range securityFlags {
		cmd.Flags().String(f.flag, "", f.usage)
	}
}

// clientSecurity reads the security flags of cmd.
func clientSecurity(cmd *cobra.Command) master.ClientSecurity {
	get := func(name string) string {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			return fl.Value.String()
		}
		return ""
	}
	return master.ClientSecurity{CAFile: get("tls-ca-file"), CertFile: get("tls-cert-file"), KeyFile: get("tls-key-file"),
		ServerName: get("tls-server-name"), TokenFile: get("auth-token-file")}
}

// dialMaster connects to the master at addr with cmd's security flags.
func dialMaster(ctx context.Context, cmd *cobra.Command, addr string) (master.Client, error) {
	return dialWith(ctx, addr, clientSecurity(cmd))
}

// dialWith connects to the master at addr (host:port, or the leader found
// in etcd for etcd://…) with sec.
func dialWith(ctx context.Context, addr string, sec master.ClientSecurity) (master.Client, error) {
	if config.IsEtcdAddr(addr) {
		mc, err := ha.Dial(ctx, addr, ha.DialOptions{Security: sec})
		if err != nil {
			return nil, fmt.Errorf("--master-server-addr=%s: %w", addr, err)
		}
		return mc, nil
	}
	opts, err := sec.DialOptions()
	if err != nil {
		return nil, err
	}
	fast, err := sec.FastPath()
	if err != nil {
		return nil, err
	}
	mc, err := master.DialFast(ctx, addr, fast, opts...)
	if err != nil {
		return nil, fmt.Errorf("--master-server-addr=%s: %w", addr, err)
	}
	return mc, nil
}
