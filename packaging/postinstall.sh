#!/bin/sh
# postinstall of the dlock Debian package: the dedicated system user the
# unit runs as, the environment file readable by it, and systemd told about
# the unit. The service is neither enabled nor started: see
# /usr/share/doc/dlock/operations.md, "Install".
set -e
if ! getent passwd dlock >/dev/null; then
	adduser --system --group --home /nonexistent --no-create-home --quiet dlock 2>/dev/null ||
		useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin dlock
fi
chown root:dlock /etc/dlock /etc/dlock/dlock.env
chmod 0750 /etc/dlock
chmod 0640 /etc/dlock/dlock.env
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
