"""The host processes expected on a GPU node, by process name and executable file name
(each matched whole, `attribution.kubernetes.is_expected`): display servers and
compositors hold a graphics context on a workstation's GPU.
`--kubernetes.expected-host-processes`'s default. Apart from `attribution.kubernetes` so
that the flags name it without loading the Kubernetes attribution, which the daemon loads
only when the collector is on."""

EXPECTED_HOST_PROCESSES = "Xorg|Xwayland|gnome-shell|kwin_x11|kwin_wayland|sway|weston"
