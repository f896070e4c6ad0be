//! nginx's upstream writes, for the call chains (issue 50): where to place
//! `ngx_chain_writer_enter` (src/bpf/ngxchain.h) in an executable that exports
//! `ngx_chain_writer` and `ngx_http_upstream_init` (nginx, openresty, angie: nginx exports
//! its symbols for dynamic modules). Read as untrusted, as the TLS sites.

use super::discover::{first_instruction_emulated, FunctionSite};
use super::elf::Elf;
use super::untrusted::{ReadAt, Skip};

/// The function probed (its first argument: the upstream's `ngx_chain_writer_ctx_t`).
pub const CHAIN_WRITER: &str = "ngx_chain_writer";
/// Defined by nginx's HTTP upstream only: the file is an nginx with HTTP proxying.
pub const UPSTREAM_INIT: &str = "ngx_http_upstream_init";

/// `ngx_chain_writer`'s file offset and whether the kernel single-steps its first
/// instruction; None unless the file defines both functions (or the site is outside the
/// file). The probe reads LP64 offsets (x86-64, arm64); off x86-64 the site counts as
/// single-stepped (unknown: the cost is not understated).
pub fn chain_writer_site<R: ReadAt + ?Sized>(elf: &Elf<R>) -> Result<Option<FunctionSite>, Skip> {
    let [Some(writer), Some(_)] = elf.find_symbols([CHAIN_WRITER, UPSTREAM_INIT])? else {
        return Ok(None);
    };
    let Some(sec) = elf.sections.get(writer.section) else {
        return Ok(None);
    };
    let (Some((file_off, _)), Some(rel)) = (sec.file_range(), writer.value.checked_sub(sec.addr))
    else {
        return Ok(None);
    };
    let Some(offset) = file_off.checked_add(rel) else {
        return Ok(None);
    };
    let code = elf.code_at(writer.section, writer.value, 16);
    let stepped = !(elf.is_x86_64() && code.is_some_and(|c| first_instruction_emulated(&c)));
    Ok(Some(FunctionSite { offset, stepped }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nginx installed here (scripts/deps), when there is one: its exported writer,
    /// whose first instruction (`push %r15`) the kernel emulates.
    #[test]
    fn the_installed_nginx_exports_its_chain_writer_at_an_emulated_push() {
        let path = std::path::Path::new("/usr/sbin/nginx");
        let Ok(file) = super::super::untrusted::FoundFile::at(path).and_then(|f| f.open()) else {
            eprintln!("no nginx installed: nothing to check");
            return;
        };
        let elf = Elf::parse(&file).unwrap().unwrap();
        let site = chain_writer_site(&elf)
            .unwrap()
            .expect("nginx's ngx_chain_writer");
        assert!(
            !site.stepped,
            "ngx_chain_writer begins with a push: emulated"
        );
        assert!(site.offset > 0);
    }

    #[test]
    fn a_file_without_nginx_symbols_has_no_site() {
        let bytes = super::super::elf::minimal();
        let elf = Elf::parse(&bytes[..]).unwrap().unwrap();
        assert_eq!(chain_writer_site(&elf).unwrap(), None);
    }
}
