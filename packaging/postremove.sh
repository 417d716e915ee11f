#!/bin/sh
# postremove of the dlock Debian package. The dlock user and, on remove
# (not purge), /etc/dlock stay, as Debian packages do.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
