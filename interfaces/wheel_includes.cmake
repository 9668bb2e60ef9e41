# Loaded after project() through CMAKE_PROJECT_INCLUDE by build_interfaces.py.
# The ROS wheels' exported rosidl_generator_py targets name the include folders of the machine
# that built the wheels (/opt/python/...); at the end of the configure step, point them at this
# interpreter's headers (JPN_PYTHON_INCLUDE) and NumPy's (JPN_NUMPY_INCLUDE) instead.
function(jpn_fix_wheel_include_directories)
  get_directory_property(imported_targets IMPORTED_TARGETS)
  foreach(target IN LISTS imported_targets)
    get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT dirs OR NOT dirs MATCHES "/opt/python/")
      continue()
    endif()
    set(fixed "")
    foreach(dir IN LISTS dirs)
      if(dir MATCHES "^/opt/python/.*numpy")
        list(APPEND fixed "${JPN_NUMPY_INCLUDE}")
      elseif(dir MATCHES "^/opt/python/")
        list(APPEND fixed "${JPN_PYTHON_INCLUDE}")
      else()
        list(APPEND fixed "${dir}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
  endforeach()
endfunction()

cmake_language(DEFER CALL jpn_fix_wheel_include_directories)

# Only Python loads these packages here, through the C type supports (rclpy and rmw_fastrtps_cpp
# read rosidl_typesupport_c and _fastrtps_c): the C++ generators (messages, their type support,
# introspection and Fast DDS type supports) were 40 % of the build, for nothing in the venv.
# Found first, with its extensions filtered; the package's own find_package then returns at once.
find_package(rosidl_default_generators REQUIRED)
list(FILTER AMENT_EXTENSIONS_rosidl_generate_idl_interfaces EXCLUDE REGEX "^[a-z_]+_cpp:")
