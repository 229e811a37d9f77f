//! Listening sockets that systemd passes to `serve` (socket activation, `sd_listen_fds(3)`).
//!
//! With `hookinbox.socket` enabled, systemd binds the public port (:443 without any
//! capability for the service) and keeps the socket open across restarts and upgrades: while
//! one `serve` stops and the next starts, the kernel queues new connections in the socket's
//! backlog instead of refusing them. A socket named `public` (`FileDescriptorName=`), or the
//! only one passed, is the public listener; one named `admin` is the admin listener; a
//! listener that systemd does not pass is bound from the config as without systemd.
//!
//! What is passed is checked before anything is served: a name other than these two, two
//! sockets for one listener, a UDP or UNIX socket, or a TCP socket that does not listen
//! (`Accept=yes`) is a start-up error naming the fix in the `.socket` unit.
//!
//! Taking the sockets unsets `LISTEN_FDS` and `LISTEN_PID`, so that no child takes them for
//! its own; it must run before any thread exists (see [`Inherited::from_env`]).

use std::net::{SocketAddr, TcpListener};

use nix::sys::socket::{getsockopt, sockopt};

/// The name that makes a passed socket the public listener (`FileDescriptorName=public`).
pub const PUBLIC: &str = "public";
/// The name that makes a passed socket the admin listener (`FileDescriptorName=admin`).
pub const ADMIN: &str = "admin";

/// A listening socket systemd passed, with the name it was given.
#[derive(Debug)]
pub struct Passed {
    pub listener: TcpListener,
    /// `FileDescriptorName=`; systemd's default is the socket unit's name.
    pub name: String,
    pub addr: SocketAddr,
}

/// The listeners systemd passed, by role; `None` is bound from the config.
#[derive(Debug, Default)]
pub struct Inherited {
    pub public: Option<Passed>,
    pub admin: Option<Passed>,
}

/// A socket systemd passed that `serve` cannot use, or an environment that does not say
/// which sockets were passed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "systemd passed sockets, but LISTEN_FDS, LISTEN_PID or LISTEN_FDNAMES cannot be \
         read ({0}); start hookinbox from a .socket unit or without these variables"
    )]
    Environment(std::io::Error),
    #[error(
        "systemd passed a socket named {name:?} (fd {fd}) among {count}: hookinbox takes \
         the sockets named \"{PUBLIC}\" and \"{ADMIN}\"; set FileDescriptorName=public or \
         FileDescriptorName=admin in its .socket unit"
    )]
    UnknownName { name: String, fd: i32, count: usize },
    #[error(
        "systemd passed two sockets named {name:?}: hookinbox serves one {name} listener; \
         give the {name} .socket unit one ListenStream= (\"443\" alone listens on IPv4 \
         and IPv6)"
    )]
    Twice { name: String },
    #[error(
        "systemd passed socket {name:?} (fd {fd}), {what}: hookinbox takes TCP sockets; \
         use ListenStream= with a port (\"443\" or \"127.0.0.1:9180\") in its .socket unit"
    )]
    NotTcp { name: String, fd: i32, what: String },
    #[error(
        "systemd passed socket {name:?} (fd {fd}), a TCP socket that is not listening: \
         set Accept=no (the default) in its .socket unit; hookinbox accepts the \
         connections itself"
    )]
    NotListening { name: String, fd: i32 },
    #[error("systemd passed socket {name:?} (fd {fd}): {error}")]
    Socket {
        name: String,
        fd: i32,
        error: std::io::Error,
    },
}

impl Inherited {
    /// No sockets from systemd: both listeners are bound from the config.
    pub fn none() -> Inherited {
        Inherited::default()
    }

    /// The sockets systemd passed to this process (none outside socket activation), taken
    /// once. `LISTEN_FDS` and `LISTEN_PID` are unset: call this before any thread exists,
    /// since another thread reading the environment while it changes is undefined
    /// behaviour. (`LISTEN_FDNAMES` stays: without `LISTEN_FDS` it passes nothing, and a
    /// command target starts with an empty environment anyway.)
    pub fn from_env() -> Result<Inherited, Error> {
        // sd-notify reads the protocol (the PID check, the count, the names, CLOEXEC);
        // listenfd turns each descriptor into a TcpListener after checking its kind, and
        // unsets the variables. Both read the same variables, in this order.
        let named: Vec<(i32, String)> = sd_notify::listen_fds_with_names()
            .map_err(Error::Environment)?
            .collect();
        let mut fds = listenfd::ListenFd::from_env();
        if named.is_empty() {
            return Ok(Inherited::none());
        }
        let count = named.len();
        let mut inherited = Inherited::none();
        for (index, (fd, name)) in named.into_iter().enumerate() {
            let role = match (name.as_str(), count) {
                (PUBLIC, _) => PUBLIC,
                (ADMIN, _) => ADMIN,
                // systemd names a socket after its unit unless told otherwise: the only one
                // passed is the public listener, whatever its name.
                (_, 1) => PUBLIC,
                _ => return Err(Error::UnknownName { name, fd, count }),
            };
            let listener = take_tcp(&mut fds, index, fd, &name)?;
            let addr = listener.local_addr().map_err(|error| Error::Socket {
                name: name.clone(),
                fd,
                error,
            })?;
            let slot = if role == PUBLIC {
                &mut inherited.public
            } else {
                &mut inherited.admin
            };
            if slot.is_some() {
                return Err(Error::Twice { name: role.into() });
            }
            *slot = Some(Passed {
                listener,
                name,
                addr,
            });
        }
        Ok(inherited)
    }
}

/// The descriptor at `index` as a listening TCP socket, or why it is not one.
fn take_tcp(
    fds: &mut listenfd::ListenFd,
    index: usize,
    fd: i32,
    name: &str,
) -> Result<TcpListener, Error> {
    let listener = match fds.take_tcp_listener(index) {
        Ok(Some(l)) => l,
        // Taken already: the variables were read twice in this process.
        Ok(None) => {
            return Err(Error::Socket {
                name: name.into(),
                fd,
                error: std::io::Error::other("already taken"),
            });
        }
        Err(e) => {
            // Only to say what it is; a descriptor of another kind is left alone.
            let what = if matches!(fds.take_udp_socket(index), Ok(Some(_))) {
                "a UDP socket (ListenDatagram=)".to_owned()
            } else if matches!(fds.take_unix_listener(index), Ok(Some(_))) {
                "a UNIX socket (a path in ListenStream=)".to_owned()
            } else {
                format!("not a TCP socket ({e})")
            };
            return Err(Error::NotTcp {
                name: name.into(),
                fd,
                what,
            });
        }
    };
    match getsockopt(&listener, sockopt::AcceptConn) {
        Ok(true) => Ok(listener),
        Ok(false) => Err(Error::NotListening {
            name: name.into(),
            fd,
        }),
        Err(e) => Err(Error::Socket {
            name: name.into(),
            fd,
            error: e.into(),
        }),
    }
}
