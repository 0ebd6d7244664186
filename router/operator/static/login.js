"use strict";
// Trades the token for the dashboard's cookie (HttpOnly: no script reads it afterwards).
// A link of the form /ui/login#token=... signs in at once; the fragment never reaches a server
// or a log, and is wiped from the address bar and history before anything else happens.

async function signIn(token) {
  const response = await fetch("/ui/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token: token }),
    cache: "no-store",
  });
  if (response.ok) {
    location.replace("/ui/");
    return;
  }
  document.getElementById("login-result").textContent =
    response.status === 401 ? "wrong token" : "sign-in failed: " + response.status;
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn(document.getElementById("token").value.trim());
});

const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.has("token")) {
  history.replaceState(null, "", location.pathname);
  signIn(fragment.get("token"));
}
